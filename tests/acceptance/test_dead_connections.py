"""A handler thread's connection that died while the thread was idle (the server restarted or
failed over, a keepalive gave up) is replaced before the next run, not found dead by it."""

import time

import pytest

from django_pgjobs import JobStatus, enqueue
from django_pgjobs.models import Job
from tests.conftest import eventually, sql

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_idle_threads_dead_connection_costs_no_attempt(start_worker, invariants):
    w = start_worker("--concurrency", "1", "--poll-interval", "0.2", "-v", "1")
    first = enqueue("test.behave", {"do": "ok"})
    eventually(
        lambda: Job.objects.get(pk=first.id).status == JobStatus.COMPLETED,
        timeout=30,
        message="first job done",
    )
    ended = sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE 'pgjobs:%%:exec'"
    )
    assert ended == [(True,)]  # the handler thread's connection, now idle
    eventually(
        lambda: (
            not sql("SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'pgjobs:%%:exec'")
        ),
        message="its session ended",
    )
    time.sleep(1.2)  # time under test: the thread rests longer than executor.IDLE_CHECK
    second = enqueue("test.behave", {"do": "ok"})
    invariants.track(first.id, second.id)
    eventually(
        lambda: (
            Job.objects.get(pk=second.id).status != JobStatus.PENDING
            and Job.objects.get(pk=second.id).status != JobStatus.RUNNING
        ),
        timeout=30,
        message="second job ran",
    )
    done = Job.objects.get(pk=second.id)
    assert (done.status, done.attempts, done.history) == (JobStatus.COMPLETED, 1, []), done.error
    w.signal(15)
    assert w.wait(timeout=30) == 0, w.output()
    invariants.check(drained=True)
