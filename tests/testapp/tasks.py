"""Django ``@task`` functions used by the Tasks tests (autodiscovered: PGJOBS['AUTODISCOVER_MODULES']).

Every run that matters writes a row, so tests (and worker subprocesses) leave evidence:
Execution for each attempt of a context task, Effect for business side effects.
"""

import os
from datetime import timedelta

from django_pgjobs.tasks_api import task

from .models import Effect, Execution


class TaskBoom(Exception):  # noqa: N818 - reads well in assertions
    pass


@task()
def add(a, b):
    return a + b


@task(queue_name="emails", priority=10)
def send_welcome(user_id):
    Effect.objects.create(job_id=0, value=f"welcome:{user_id}")


@task()
def record(label):
    """Writes Effect(value=label): the order of Effect ids is the order of runs."""
    Effect.objects.create(job_id=0, value=str(label))
    return label


@task(takes_context=True, max_attempts=3, backoff=lambda attempt: 0)
def flaky(context, fail_times):
    """Fails its first ``fail_times`` attempts, then returns what it saw."""
    Execution.objects.create(
        job_id=int(context.task_result.id),
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
        pid=os.getpid(),
    )
    if context.attempt <= fail_times:
        raise TaskBoom(f"failing attempt {context.attempt}")
    return {"attempt": context.attempt, "job_attempts": context.job.attempts}


@task(max_attempts=1)
def boom(message):
    raise TaskBoom(message)


@task()
async def async_double(n):
    return n * 2


@task(max_attempts=1)
def returns_object():
    return object()


@task(unique_key=lambda user_id: f"user:{user_id}")
def sync_user(user_id):
    return user_id


@task(timeout=0.3, max_attempts=1)
def sleepy(seconds):
    import time

    time.sleep(seconds)


@task()
def forever(n):
    """Enqueues itself again: run_jobs() must stop it."""
    forever.enqueue(n + 1)


@task()
def countdown(n):
    """Enqueues countdown(n - 1) until 0."""
    if n > 0:
        countdown.enqueue(n - 1)
    return n


@task(takes_context=True)
def count_up(context, n):
    """Reports its progress through the task context (tests/acceptance/ops/test_progress.py)."""
    for i in range(1, n + 1):
        context.progress(i, n, note="counted" if i == n else None)
    return n


@task(max_attempts=3)
def cancels_itself():
    """Ends its job CANCELLED (tests/acceptance/ops/test_cancelled.py)."""
    from django_pgjobs import Cancelled

    raise Cancelled("no longer wanted")


@task(debounce=timedelta(seconds=30), debounce_key=lambda doc_id, **_: f"doc:{doc_id}")
def reindex(doc_id, version=0):
    return {"doc": doc_id, "version": version}
