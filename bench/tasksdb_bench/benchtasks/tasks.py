import probe
from django.tasks import task


@task
def noop(i: int) -> None:
    probe.hit(i)
