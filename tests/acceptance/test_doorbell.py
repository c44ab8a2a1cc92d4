"""The doorbell (doorbell.py): enqueue rings only while a worker sleeps, and no wakeup is lost
between a worker going to sleep and a producer deciding not to ring. Real runjobs workers that
poll every 30 s: a job done within seconds was woken by the doorbell."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest
from django.db import connection, connections, transaction

from django_pgjobs import JobStatus, doorbell, enqueue
from django_pgjobs.models import Job
from tests.conftest import eventually, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

NOTIFY_ONLY = ("--poll-interval", "30", "--concurrency", "1", "-v", "1")
PICKED_UP = 3.0  # seconds: far below the poll interval


def _conn() -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def _asleep(worker) -> bool:
    """The worker's listener holds the sleepers' lock S (it sleeps, or is going to)."""
    return bool(
        sql_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l USING (pid) "
            "WHERE a.application_name LIKE %s AND l.locktype = 'advisory' AND l.mode = 'ShareLock' "
            "AND l.granted AND l.objid::int = %s",
            [f"pgjobs:%:{worker.pid}:%:listen", doorbell.channel_key("pgjobs")],
        )
    )


def _status(job_id: int) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first()


def _stop(worker) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()


class OpenProducer:
    """A producer on its own thread: enqueues in a transaction, holds it open until told."""

    def __init__(self) -> None:
        self.inserted, self.commit, self.done = (threading.Event() for _ in range(3))
        self.job_id: int | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.inserted.wait(20), "producer never inserted"

    def _run(self) -> None:
        try:
            with transaction.atomic():
                self.job_id = enqueue("test.behave", {"do": "ok"}).id
                self.inserted.set()
                self.commit.wait(60)
        finally:
            connections.close_all()
            self.done.set()

    def commit_now(self) -> float:
        self.commit.set()
        assert self.done.wait(20)
        return time.monotonic()


def test_a_job_inserted_before_the_worker_sleeps_and_committed_after_is_picked_up(start_worker):
    """The race the gate closes: the producer probed S before any worker slept (no ring), and
    commits while the worker sleeps. Without the gate the job would wait for the 30 s poll."""
    producer = OpenProducer()  # no worker yet: nobody to ring for
    w = start_worker(*NOTIFY_ONLY)
    eventually(lambda: _asleep(w), timeout=30, message="worker asleep")
    time.sleep(0.5)  # time under test: the worker sleeps through claims that see nothing
    assert _status(producer.job_id) is None  # uncommitted
    committed = producer.commit_now()
    eventually(
        lambda: _status(producer.job_id) == JobStatus.COMPLETED,
        timeout=PICKED_UP,
        interval=0.01,
        message="job picked up without waiting for the poll",
    )
    assert time.monotonic() - committed < PICKED_UP
    _stop(w)


def test_a_job_inserted_while_the_worker_sleeps_rings_on_commit(start_worker):
    """The other order: the worker sleeps first; the producer sees it and rings (on commit)."""
    w = start_worker(*NOTIFY_ONLY)
    eventually(lambda: _asleep(w), timeout=30, message="worker asleep")
    time.sleep(0.3)  # time under test: past the gate and its last claim, the worker sleeps
    producer = OpenProducer()
    time.sleep(0.3)  # time under test: an open insert stays invisible while time passes
    assert _status(producer.job_id) is None  # invisible until commit
    producer.commit_now()
    eventually(
        lambda: _status(producer.job_id) == JobStatus.COMPLETED,
        timeout=PICKED_UP,
        interval=0.01,
        message="woken by the doorbell",
    )
    _stop(w)


def test_a_busy_worker_is_not_rung_and_loses_nothing(start_worker):
    """While its one thread is busy the worker does not hold the doorbell: enqueues send no
    NOTIFY; once the run ends it claims what came meanwhile without waiting for the poll."""
    w = start_worker(*NOTIFY_ONLY)
    eventually(lambda: _asleep(w), timeout=30, message="worker asleep")
    slow = enqueue("test.behave", {"do": "sleep", "seconds": 2})
    eventually(
        lambda: _status(slow.id) == JobStatus.RUNNING, timeout=PICKED_UP, message="slow job running"
    )
    eventually(lambda: not _asleep(w), timeout=2, message="doorbell released while busy")
    listener = _conn()
    try:
        listener.execute("LISTEN pgjobs")
        queued = [enqueue("test.behave", {"do": "ok"}).id for _ in range(5)]
        assert list(listener.notifies(timeout=0.3)) == []  # nobody to ring for
    finally:
        listener.close()
    eventually(
        lambda: all(_status(j) == JobStatus.COMPLETED for j in queued),
        timeout=10,
        message="jobs enqueued while busy done after the slow one",
    )
    _stop(w)


def test_enqueue_takes_the_gate_before_it_probes_the_sleepers():
    """Evaluation order inside the INSERT: G is held (until commit) before S is probed, and a
    producer that cannot take G rings without probing."""
    k = doorbell.channel_key("pgjobs")
    gate, sleepers = _conn(), _conn()
    try:
        gate.execute("LISTEN pgjobs")
        with transaction.atomic():  # nobody sleeps: no ring, G held until commit, S released
            enqueue("test.echo", {})
            held = sql(
                "SELECT classid::int, mode FROM pg_locks WHERE locktype = 'advisory' "
                "AND pid = pg_backend_pid() AND objid::int = %s",
                [k],
            )
            assert held == [(doorbell._GATE, "ShareLock")]
        assert list(gate.notifies(timeout=0.3)) == []
        # A worker passing the gate holds G exclusively: the producer rings, S untouched.
        assert gate.execute(f"SELECT pg_try_advisory_lock({doorbell._GATE}, {k})").fetchone()[0]
        enqueue("test.echo", {}, queue="gated")
        assert [n.payload for n in gate.notifies(timeout=2, stop_after=1)] == ["gated"]
        gate.execute(doorbell.DISARM_SQL)
        # A sleeper holds S: the producer rings.
        assert sleepers.execute(doorbell.arm_sql("pgjobs")).fetchone()[0]
        enqueue("test.echo", {}, queue="rung")
        assert [n.payload for n in gate.notifies(timeout=2, stop_after=1)] == ["rung"]
    finally:
        gate.close()
        sleepers.close()


def _asleep_on(worker, queue: str) -> bool:
    """The worker's listener holds S of ``queue`` (a worker of named queues)."""
    return bool(
        sql_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l USING (pid) "
            "WHERE a.application_name LIKE %s AND l.locktype = 'advisory' AND l.mode = 'ShareLock' "
            "AND l.granted AND l.classid::int = %s AND l.objid::int = hashtext(%s)",
            [f"pgjobs:%:{worker.pid}:%:listen", doorbell.queue_class("pgjobs"), queue],
        )
    )


def test_a_sleeper_of_another_queue_is_not_rung_and_one_of_the_queue_wakes_at_once(start_worker):
    """Per queue: enqueues on A ring nobody while only a worker of B sleeps; one of A is rung
    and wakes at once; concurrent producers on both queues lose no wakeup of B's worker."""
    b = start_worker(*NOTIFY_ONLY, "--queues", "b")
    eventually(lambda: _asleep_on(b, "b"), timeout=30, message="worker of b asleep")
    assert not _asleep(b)  # it does not hold S(*)
    listener = _conn()
    try:
        listener.execute("LISTEN pgjobs")
        on_a = [enqueue("test.echo", {}, queue="a").id for _ in range(5)]
        assert list(listener.notifies(timeout=0.3)) == []  # nobody of a sleeps
        job = enqueue("test.echo", {}, queue="b")
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["b"]
    finally:
        listener.close()
    eventually(lambda: _status(job.id) == JobStatus.COMPLETED, timeout=PICKED_UP, interval=0.01)
    a = start_worker(*NOTIFY_ONLY, "--queues", "a")
    eventually(
        lambda: all(_status(j) == JobStatus.COMPLETED for j in on_a), timeout=30, message="a runs"
    )
    eventually(lambda: _asleep_on(a, "a"), timeout=30, message="worker of a asleep")
    woken = enqueue("test.echo", {}, queue="a")
    eventually(lambda: _status(woken.id) == JobStatus.COMPLETED, timeout=PICKED_UP, interval=0.01)

    def produce(queue: str, ids: list[int]) -> None:
        try:
            for i in range(15):
                ids.append(enqueue("test.echo", {"i": i}, queue=queue).id)
                time.sleep(0.002 * (i % 4))  # the workers fall asleep between some of them
        finally:
            connections.close_all()

    ids: dict[str, list[int]] = {"a": [], "b": []}
    threads = [threading.Thread(target=produce, args=(q, ids[q])) for q in ("a", "b", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    eventually(
        lambda: all(_status(j) == JobStatus.COMPLETED for j in ids["a"] + ids["b"]),
        timeout=PICKED_UP * 2,  # far below the 30 s poll: none waited for it
        interval=0.02,
        message="every job woken without the poll",
    )
    _stop(a)
    _stop(b)
