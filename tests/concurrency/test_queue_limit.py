"""A queue's cluster-wide concurrency limit holds while several runjobs processes compete."""

import pytest

from django_pgjobs import enqueue_many
from django_pgjobs.models import Queue
from tests.conftest import deadlocks, eventually, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)


def test_cluster_wide_limit_holds_across_worker_processes(start_worker):
    """Four single-thread workers on a queue capped at 2: two run at once, never three."""
    Queue.objects.create(name="emails", concurrency_limit=2, paused=True)
    enqueue_many("test.behave", [{"do": "sleep", "seconds": 0.15}] * 16, queue="emails")
    before = deadlocks()
    workers = [
        start_worker("--concurrency", "1", "--poll-interval", "0.05", "-v", "0") for _ in range(4)
    ]
    # Start together: resume the queue once every worker is up (a paused queue is not claimed).
    eventually(lambda: sql_one("SELECT count(*) FROM pgjobs_worker") == 4, timeout=60)
    assert sql_one("SELECT count(*) FROM pgjobs_job WHERE status <> 'PENDING'") == 0
    Queue.objects.filter(name="emails").update(paused=False)
    peak = 0

    def sampled_until_done() -> bool:
        nonlocal peak
        peak = max(peak, sql_one("SELECT count(*) FROM pgjobs_job WHERE status='RUNNING'"))
        return sql_one("SELECT count(*) FROM pgjobs_job WHERE status='COMPLETED'") == 16

    eventually(sampled_until_done, timeout=60, interval=0.01, message="16 jobs completed")
    for w in workers:
        w.signal(15)
        assert w.wait(30) == 0
    assert sql_one("SELECT count(*) FROM pgjobs_job WHERE status='COMPLETED'") == 16
    assert peak == 2
    # From the execution log: at no instant did more than two runs overlap.
    spans = sql("SELECT started_at, finished_at FROM testapp_execution ORDER BY started_at")
    for i, (start, _) in enumerate(spans):
        overlapping = sum(1 for s, f in spans[: i + 1] if f is None or f > start)
        assert overlapping <= 2
    assert sql_one("SELECT count(DISTINCT pid) FROM testapp_execution") >= 2
    assert deadlocks() - before == 0
