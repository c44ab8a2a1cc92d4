"""@task functions run by a real `runjobs` subprocess (committed transactions, as in
production)."""

import os

import pytest

from django_pgjobs.tasks_api import TaskResultStatus
from tests.conftest import eventually
from tests.testapp import tasks as t
from tests.testapp.models import Effect, Execution

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_runjobs_subprocess_processes_task_jobs(start_worker):
    welcome = t.send_welcome.enqueue(11)
    flaky = t.flaky.enqueue(1)
    total = t.add.enqueue(20, 22)
    proc = start_worker("--burst", "--concurrency", "2")
    assert proc.wait(timeout=60) == 0, proc.output()

    for r in (welcome, flaky, total):
        r.refresh()
    assert [r.status for r in (welcome, flaky, total)] == [TaskResultStatus.SUCCESSFUL] * 3, (
        proc.output()
    )
    assert total.return_value == 42
    assert Effect.objects.filter(value="welcome:11").count() == 1
    assert flaky.attempts == 2 and flaky.errors[0].exception_class is t.TaskBoom
    assert all(f":{proc.pid}:" in w for w in flaky.worker_ids)
    pids = set(Execution.objects.filter(job_id=int(flaky.id)).values_list("pid", flat=True))
    assert pids == {proc.pid} and proc.pid != os.getpid()
    eventually(lambda: proc.proc.poll() is not None)
