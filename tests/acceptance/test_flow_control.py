"""Flow control with real workers (docs/flow-control.md): 4 `runjobs` x 8 threads never run more
of a key or a queue than its limit, never start more than rate x period + burst in any window,
run each job once; a stalled worker's key slot is freed when its lease is reaped."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest

from django_pgjobs import enqueue, enqueue_many
from django_pgjobs.models import Queue
from tests.acceptance.flow_settings import FLOW_QUEUES
from tests.acceptance.invariants import Invariants
from tests.conftest import eventually, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = ("--settings", "tests.acceptance.flow_settings")
RATE, BURST = 20.0, 5  # FLOW_QUEUES["rated"]


@pytest.fixture(autouse=True)
def _declared(settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUES": FLOW_QUEUES}


def _peaks() -> tuple[int, int]:
    """(RUNNING jobs of the busiest key of "keyed", RUNNING jobs of "keyed") now."""
    per_key = sql_one(
        "SELECT max(n) FROM (SELECT count(*) n FROM pgjobs_job WHERE status = 'RUNNING' "
        "AND queue = 'keyed' GROUP BY flow_key) k"
    )
    total = sql_one("SELECT count(*) FROM pgjobs_job WHERE status='RUNNING' AND queue='keyed'")
    return int(per_key or 0), int(total)


def _max_overlap(spans: list[tuple]) -> int:
    """Most runs in progress at one instant, from (started, finished) spans."""
    events = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans], key=lambda e: e)
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_limits_hold_across_four_workers_of_eight_threads(start_worker):
    Queue.objects.create(name="keyed", paused=True)
    Queue.objects.create(name="rated", paused=True)
    keyed = enqueue_many(
        "test.behave",
        [{"do": "sleep", "seconds": 0.05, "k": f"c{i % 4}"} for i in range(60)],
        queue="keyed",
    )
    rated = enqueue_many("test.behave", [{}] * 50, queue="rated")
    inv = Invariants.begin().track(keyed, rated)
    workers = [
        start_worker(*SETTINGS, "--concurrency", "8", "--poll-interval", "0.05", "-v", "0")
        for _ in range(4)
    ]
    eventually(lambda: sql_one("SELECT count(*) FROM pgjobs_worker") == 4, timeout=60)
    Queue.objects.update(paused=False)
    opened = time.monotonic()
    peak_key = peak_queue = 0
    deadline = opened + 60
    while time.monotonic() < deadline:
        k, q = _peaks()
        peak_key, peak_queue = max(peak_key, k), max(peak_queue, q)
        if sql_one("SELECT count(*) FROM pgjobs_job WHERE status <> 'COMPLETED'") == 0:
            break
        time.sleep(0.005)
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()[-3000:]
    inv.check(drained=True)
    assert 0 < peak_key <= 2 and 0 < peak_queue <= 6, (peak_key, peak_queue)
    # The execution log: runs of one key (of the queue) never overlapped beyond the limit.
    runs = sql(
        "SELECT j.flow_key, e.started_at, e.finished_at FROM testapp_execution e "
        "JOIN pgjobs_job j ON j.id = e.job_id WHERE j.queue = 'keyed'"
    )
    assert len(runs) == 60  # each job once
    for key in {r[0] for r in runs}:
        assert _max_overlap([(s, f) for k, s, f in runs if k == key]) <= 2, key
    assert _max_overlap([(s, f) for _, s, f in runs]) <= 6
    # Starts of "rated" (claim times, database clock): <= rate x period + burst in every window.
    starts = [
        r[0]
        for r in sql("SELECT started_at FROM pgjobs_job WHERE queue = 'rated' ORDER BY started_at")
    ]
    assert len(starts) == 50
    for i, first in enumerate(starts):
        for period in (0.05, 0.2, 0.5, 1.0, 2.0):
            end = first + timedelta(seconds=period)
            n = sum(1 for s in starts[i:] if s <= end)
            assert n <= RATE * period + BURST, (period, n)
    # How close the starts come to the rate is measured by bench/flow_control.py, not here.
    assert sql_one("SELECT count(DISTINCT pid) FROM testapp_execution") >= 2


def test_a_stalled_workers_key_slot_is_freed_when_its_lease_is_reaped(start_worker):
    """SIGSTOP the worker running key x's only slot: the reaper of another worker frees it once
    the lease expires, the next job of x runs there; the stalled worker's late finalize
    changes nothing."""
    first = enqueue(
        "test.behave", {"do": "block", "seconds": 2.5, "k": "x"}, queue="solo", max_attempts=1
    )
    stalled = start_worker(*SETTINGS, "--concurrency", "2", "--lease", "1", "-v", "0")
    eventually(
        lambda: sql_one("SELECT status FROM pgjobs_job WHERE id=%s", [first.id]) == "RUNNING",
        timeout=30,
    )
    stalled.signal(signal.SIGSTOP)
    second = enqueue("test.behave", {"k": "x"}, queue="solo")
    inv = Invariants.begin().track(first.id, second.id)
    other = start_worker(
        *SETTINGS,
        "--concurrency",
        "2",
        "--lease",
        "1",
        "--reap-interval",
        "0.2",
        "--poll-interval",
        "0.05",
        "-v",
        "0",
    )
    peak = 0

    def second_done() -> bool:
        nonlocal peak
        peak = max(peak, _solo_running())
        return sql_one("SELECT status FROM pgjobs_job WHERE id=%s", [second.id]) == "COMPLETED"

    eventually(second_done, timeout=30, interval=0.01)
    assert peak <= 1
    reaped = sql_one("SELECT status FROM pgjobs_job WHERE id=%s", [first.id])
    assert reaped == "FAILED"  # max_attempts 1: the reaper's verdict
    stalled.signal(signal.SIGCONT)  # its handler ends; the finalize finds its lease gone
    eventually(
        lambda: (
            sql_one("SELECT finished_at FROM testapp_execution WHERE job_id=%s", [first.id])
            is not None
        ),
        timeout=30,
    )
    for w in (stalled, other):  # a stop writes what ended: the stale finalize too
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()[-3000:]
    row = sql("SELECT status, error FROM pgjobs_job WHERE id=%s", [first.id])[0]
    assert row[0] == "FAILED" and "lease expired" in row[1], row
    inv.check(drained=True, min_lease=1)


def _solo_running() -> int:
    return int(sql_one("SELECT count(*) FROM pgjobs_job WHERE status='RUNNING' AND queue='solo'"))
