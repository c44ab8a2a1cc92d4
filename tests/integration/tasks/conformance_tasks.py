"""``@task`` functions of tests/integration/tasks' conformance checks (imported by the tests that use them:
in-process workers only, a ``runjobs`` subprocess does not know them)."""

import math
import threading

from django_pgjobs.tasks_api import task


class Refused(Exception):  # noqa: N818 - reads well in assertions
    pass


@task()
def echo(*args, **kwargs):
    return {"args": args, "kwargs": kwargs}


@task(max_attempts=3, backoff=lambda attempt: 0)
def returns_set():
    """Not JSON: fails at once, whatever max_attempts says."""
    return {1, 2}


@task(max_attempts=3, backoff=lambda attempt: 0)
def returns_nan():
    return math.nan


@task(max_attempts=1)
def refuse(message):
    raise Refused(message)


@task(max_attempts=2, backoff=lambda attempt: 0)
def refuse_twice(message):
    raise Refused(message)


@task()
def always_refuse(message):
    """The default max_attempts (PGJOBS['MAX_ATTEMPTS']): retried before FAILED."""
    raise Refused(message)


@task(takes_context=True, max_attempts=3, backoff=lambda attempt: 0)
def context_probe(context, fail_until):
    """Returns what the context said; fails while its attempt is below ``fail_until``."""
    seen = {
        "attempt": context.attempt,
        "id": context.task_result.id,
        "status": context.task_result.status,
        "attempts": context.task_result.attempts,
    }
    if context.attempt < fail_until:
        raise Refused(f"attempt {context.attempt}")
    return seen


@task()
async def async_add(a, b):
    return a + b


@task(queue_name="emails")
def on_emails():
    return "emails"


@task(priority=-5)
def low_priority():
    return "low"


@task(takes_context=True, max_attempts=1)
def loses_its_lease(context):
    """Another worker takes the job over while it runs (the lease is replaced), then it fails."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE pgjobs_job SET lease_token = gen_random_uuid(), locked_by = 'other' "
            "WHERE id = %s",
            [int(context.task_result.id)],
        )
    raise Refused("too late")


gate = threading.Event()


@task()
def wait_for_gate():
    """Runs until the test opens ``gate`` (at most 20 s)."""
    gate.wait(20)
    return "opened"


CALLS: list[str] = []


def not_a_task():
    """Importable, but no task: a job naming it must never run it."""
    CALLS.append("called")
