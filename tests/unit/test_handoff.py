"""Handoff: claimed jobs to executor threads, one woken thread per batch of short jobs."""

import threading
import time

import pytest

from django_pgjobs.worker.handoff import Handoff
from tests.conftest import eventually


class Pool:
    """n threads taking items (callables) from a Handoff, as the worker's executors do."""

    def __init__(self, handoff: Handoff, n: int):
        self.handoff = handoff
        self.ran: list[tuple[str, int]] = []  # (item name, thread ident)
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()
        eventually(lambda: handoff._idle == n, timeout=5, interval=0.001)  # all waiting in get()

    def _loop(self):
        while (item := self.handoff.get()) is not None:
            name, fn = item
            started = time.monotonic()
            self.ran.append((name, threading.get_ident()))
            fn()
            self.handoff.ran(name.split("#")[0], time.monotonic() - started)

    def close(self):
        self.handoff.close()
        for t in self.threads:
            t.join(5)
        assert not any(t.is_alive() for t in self.threads)


def test_a_batch_of_short_jobs_runs_on_one_woken_thread():
    h = Handoff(short=10.0)  # a run slowed down by a busy machine still counts as short
    h.ran("quick", 0.00001)
    pool = Pool(h, 4)
    # each job lets go of the GIL (like a short query): woken threads would take some
    h.put_many([("quick", (f"quick#{i}", lambda: time.sleep(0.0002))) for i in range(50)])
    eventually(lambda: len(pool.ran) == 50, timeout=5, interval=0.001)
    assert [name for name, _ in pool.ran] == [f"quick#{i}" for i in range(50)]  # in order
    assert len({ident for _, ident in pool.ran}) == 1
    pool.close()


@pytest.mark.parametrize("known", [False, True], ids=["never ran here", "usually slow"])
def test_jobs_not_known_to_be_short_get_a_thread_each_at_once(known):
    h = Handoff()
    if known:
        h.ran("slow", 0.5)
    barrier = threading.Barrier(4, timeout=5)  # passes only if all four run at the same time
    pool = Pool(h, 4)
    h.put_many([("slow", (f"slow#{i}", barrier.wait)) for i in range(4)])
    eventually(lambda: len(pool.ran) == 4, timeout=5, interval=0.001)
    pool.close()
    assert not barrier.broken
    assert len({ident for _, ident in pool.ran}) == 4


def test_a_short_type_that_runs_long_does_not_hold_back_the_others():
    """The jobs behind it wait for spread(), which the main loop calls while it waits."""
    h = Handoff(grace=0.01)
    h.ran("quick", 0.00001)
    released = threading.Event()
    pool = Pool(h, 2)
    h.put_many(
        [
            ("quick", ("quick#stuck", lambda: released.wait(10))),
            ("quick", ("quick#next", released.set)),
        ]
    )
    eventually(lambda: len(pool.ran) == 1, timeout=5, interval=0.001)
    time.sleep(0.1)  # time under test: for 0.1 s without spread() the second job stays queued
    assert len(pool.ran) == 1  # no spread() yet: the second job waits behind the first
    queued_for = time.monotonic() - 0.1
    while not released.is_set():  # what the worker's main loop does between its checks
        released.wait(min(1.0, h.spread()))
        assert time.monotonic() - queued_for < 5
    eventually(lambda: len(pool.ran) == 2, timeout=5, interval=0.001)
    assert pool.ran[0][1] != pool.ran[1][1]
    pool.close()


class Clock:
    """A monotonic clock the test moves by hand (Handoff reads time.monotonic())."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def test_a_queue_that_moves_is_left_to_its_thread(monkeypatch):
    """spread() adds a thread only when the queue stalls, not because jobs have waited: on a
    busy machine more threads would only wait for a core. Played on a hand-moved clock (with
    real threads, a busy CI machine stalls a 0.3 ms job past any small grace now and then)."""
    import django_pgjobs.worker.handoff as handoff_module

    clock = Clock()
    monkeypatch.setattr(handoff_module, "time", clock)
    h = Handoff(grace=0.005)
    h.ran("quick", 0.00001)
    h._idle = 4  # four threads waiting in get()
    h.put_many([("quick", f"quick#{i}") for i in range(60)])
    assert h._idle == 3  # one woken for the batch
    for i in range(60):  # the woken thread takes a job every 0.3 ms; the main loop checks
        clock.now += 0.0003
        assert h.get() == f"quick#{i}"
        h.spread()
        h.spread()
    assert h._idle == 3  # the last job waited 18 ms (> grace), yet no thread was added
    h.put_many([("quick", "quick#stuck"), ("quick", "quick#behind")])
    assert h.get() == "quick#stuck"  # ... which then runs long: the queue stands still
    clock.now += 0.004
    h.spread()
    assert h._idle == 2  # within grace: put_many woke one, spread() none
    clock.now += 0.002
    assert h.spread() == 0.005
    assert h._idle == 1  # stood still past grace: one more thread, and only one
    assert h.spread() == 0.005
    assert h._idle == 1


def test_spread_says_when_to_look_again():
    h = Handoff(grace=0.5)
    assert h.spread() == float("inf")  # nothing waits
    h.put_many([("t", 1)])  # no thread at all: nobody to wake
    assert h.spread() == float("inf")
    h._idle = 1
    assert 0 < h.spread() <= 0.5


def test_close_lets_threads_finish_what_is_queued_then_exit():
    h = Handoff()
    h.ran("quick", 0.00001)
    pool = Pool(h, 3)
    gate = threading.Event()
    h.put_many(
        [("quick", ("quick#0", lambda: gate.wait(5)))]
        + [("quick", (f"quick#{i}", lambda: None)) for i in range(1, 6)]
    )
    h.close()
    gate.set()
    pool.close()
    assert sorted(name for name, _ in pool.ran) == [f"quick#{i}" for i in range(6)]
    assert h.get() is None


def test_typical_run_time_follows_recent_runs():
    h = Handoff(short=0.001)
    assert not h.is_short("t")  # unknown: treated as long
    h.ran("t", 0.0001)
    assert h.is_short("t")
    for _ in range(10):
        h.ran("t", 0.05)  # it became slow
    assert not h.is_short("t")
