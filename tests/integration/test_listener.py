"""The listener against real PostgreSQL: woken by the doorbell, rebuilt when its backend is
terminated, and when its backend stops answering (its self-check times out)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from django_pgjobs import enqueue
from django_pgjobs.worker import listener as listener_module
from django_pgjobs.worker.listener import Armed, Listener
from tests.conftest import eventually, sql

pytestmark = pytest.mark.django_db(transaction=True)

APP = "pgjobs:listener-test:listen"


@pytest.fixture
def listening(monkeypatch) -> Iterator[tuple[Listener, threading.Event]]:
    monkeypatch.setattr(listener_module, "CHECK_INTERVAL", 0.3)
    monkeypatch.setattr(listener_module, "CHECK_TIMEOUT", 1.0)
    woken = threading.Event()
    lst = Listener(
        alias="default", channel="pgjobs", queues=None, wake=woken.set, application_name=APP
    )
    lst.start()
    try:
        yield lst, woken
    finally:
        lst.stop()
        lst.join(10)
        assert not lst.is_alive()


def _backends() -> set[int]:
    return {
        r[0] for r in sql("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [APP])
    }


def _backend() -> int:
    pids = _backends()
    return pids.pop() if len(pids) == 1 else 0


def _rung_within(lst: Listener, woken: threading.Event, seconds: float) -> float:
    """Arm as a sleeping worker does, enqueue, and time the wake-up."""
    eventually(lst.connected.is_set, timeout=15, message="listener connected")
    assert lst.arm(5.0) is Armed.FRESH
    woken.clear()
    t0 = time.monotonic()
    enqueue("test.echo", {})
    assert woken.wait(seconds), "the doorbell did not wake the listener"
    return time.monotonic() - t0


def test_rung_then_disarmed(listening):
    lst, woken = listening
    assert _rung_within(lst, woken, 2.0) < 2.0
    # A rung sleeper is awake: the listener released S by itself.
    eventually(
        lambda: (
            not sql(
                "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE a.application_name = %s AND l.locktype = 'advisory'",
                [APP],
            )
        ),
        timeout=2,
        message="doorbell released",
    )
    assert lst.arm(5.0) is Armed.FRESH  # and arms again on request


def test_rebuilt_after_its_backend_is_terminated(listening):
    lst, woken = listening
    _rung_within(lst, woken, 2.0)
    old = _backend()
    woken.clear()
    sql("SELECT pg_terminate_backend(%s)", [old])
    assert woken.wait(5), "no wake-up after the reconnect"  # notifications may have been lost
    eventually(lambda: _backend() not in (0, old), timeout=5, message="a new LISTEN backend")
    assert lst.rebuilds >= 1
    assert _rung_within(lst, woken, 2.0) < 2.0


def test_rebuilt_when_its_backend_stops_answering(listening):
    """A backend that is alive but silent (SIGSTOP: the socket stays open, like a silent
    partition) fails the self-check within CHECK_INTERVAL + CHECK_TIMEOUT."""
    lst, woken = listening
    _rung_within(lst, woken, 2.0)
    old = _backend()
    os.kill(old, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        eventually(
            lambda: lst.rebuilds >= 1 and lst.connected.is_set(),
            timeout=10,
            interval=0.02,
            message="listener rebuilt",
        )
        detected = time.monotonic() - t0
        assert detected < 5.0, detected
        eventually(lambda: _backends() - {old}, timeout=5, message="a new LISTEN backend")
    finally:
        os.kill(old, signal.SIGCONT)
        sql("SELECT pg_terminate_backend(%s)", [old])
    assert _rung_within(lst, woken, 2.0) < 2.0


def _held_by_listener() -> int:
    return sql(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.granted",
        [APP],
    )[0][0]


def test_a_worker_of_named_queues_arms_all_of_them_or_holds_none():
    """S per queue: while a producer's probe holds S(b) the listener of a and b is not armed
    and holds nothing (a half-armed listener would be rung for a by nobody's fault); once the
    probe ends it arms both; disarmed, it holds none."""
    from django.db import connection

    from django_pgjobs import doorbell

    woken = threading.Event()
    lst = Listener(
        alias="default", channel="pgjobs", queues=["a", "b"], wake=woken.set, application_name=APP
    )
    lst.start()
    cls = doorbell.queue_class("pgjobs")
    try:
        eventually(lst.connected.is_set, timeout=15, message="listener connected")
        with connection.cursor() as probe:  # a producer's probe of S(b), held
            probe.execute("SELECT pg_advisory_lock(%s, hashtext('b'))", [cls])
            assert lst.arm(0.2) is Armed.BUSY
            eventually(lambda: _held_by_listener() == 0, timeout=2, message="holds none")
            probe.execute("SELECT pg_advisory_unlock(%s, hashtext('b'))", [cls])
        assert lst.arm(5.0) is Armed.FRESH
        assert _held_by_listener() == 2  # S(a), S(b)
        lst.disarm()
        eventually(lambda: _held_by_listener() == 0, timeout=2, message="released")
    finally:
        lst.stop()
        lst.join(10)
