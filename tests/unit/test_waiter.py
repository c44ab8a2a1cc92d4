"""Waiter: what the claim loop waits for between two steps, on its own (no worker, no database).

Its collaborators are stand-ins that report numbers (runs ended, room, due times): the
Waiter's contract is about time and events, and these tests hold it to that."""

import math
import threading
import time

from django_pgjobs.worker.handoff import Handoff
from django_pgjobs.worker.listener import Armed
from django_pgjobs.worker.waiter import BATCH_WINDOW_MAX, Waiter

LONG = 5.0  # a poll interval no test may wait out


class Ended:
    """The completer's side: how many outcomes wait; ``grow`` more each time it is asked."""

    def __init__(self, n=0, grow=0):
        self.n, self.grow = n, grow

    def waiting(self):
        n, self.n = self.n, self.n + self.grow
        return n


class Claims:
    def __init__(self, free=1, full=False):
        self.free, self.last_claim_full = free, full

    def room(self, ending):
        return self.free, self.free

    def until_next_start(self, now):
        return math.inf


class Clock:
    """Leases and progress: nothing due before ``due`` seconds."""

    def __init__(self, due=math.inf):
        self.due = due
        self.expired = 0

    def until_due(self, now):
        return self.due

    def until_lost(self, now):
        return math.inf

    def expire_unrenewed(self, now):
        self.expired += 1


class Held(list):
    def until_deadline(self, now):
        return math.inf


class Doorbell:
    def __init__(self, armed=Armed.FRESH):
        self.armed, self.calls = armed, []

    def arm(self, timeout):
        self.calls.append("arm")
        return self.armed

    def disarm(self):
        self.calls.append("disarm")


def waiter(
    *, poll=LONG, ended=None, claims=None, held=0, refill=1, listener=None, claim_once=lambda: 0
):
    w = Waiter(
        poll_interval=poll,
        refill=refill,
        wake=threading.Event(),
        stopping=threading.Event(),
        slots=Held([None] * held),
        completer=ended or Ended(),
        producer=claims or Claims(),
        leases=Clock(),
        progress=Clock(),
        handoff=Handoff(),
        claim_once=claim_once,
    )
    w.listener = listener
    return w


def timed(fn):
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def later(seconds, fn):
    t = threading.Timer(seconds, fn)
    t.start()
    return t


def test_returns_at_once_when_the_last_claim_was_full():
    doorbell = Doorbell()
    w = waiter(claims=Claims(full=True), listener=doorbell)
    assert timed(w.wait) < 1.0
    assert doorbell.calls == []  # no doorbell: the next claim follows at once


def test_sleeps_until_woken():
    w = waiter()
    later(0.05, w.wake_event.set)
    assert 0.04 <= timed(w.wait) < 1.0 * LONG / 2
    assert not w.wake_event.is_set()  # consumed


def test_sleeps_until_the_poll_interval_or_the_next_heartbeat():
    assert 0.09 <= timed(waiter(poll=0.1).wait) < 2.0
    w = waiter()
    w.leases.due = 0.1
    assert 0.09 <= timed(w.wait) < 2.0


def test_a_micro_batch_is_gathered_within_the_window_max():
    # runs keep ending (one more each time): the wait ends at BATCH_WINDOW_MAX, not later
    w = waiter(ended=Ended(n=1, grow=1), held=1000, refill=1000)
    assert timed(w.wait) < BATCH_WINDOW_MAX + 0.5


def test_a_window_in_which_no_run_ended_ends_the_batch():
    w = waiter(ended=Ended(n=3, grow=0), held=10, refill=10)
    assert timed(w.wait) < 0.5


def test_enough_ended_needs_no_window():
    w = waiter(ended=Ended(n=4, grow=1), held=10, refill=4)
    assert timed(w.wait) < 0.5


def test_armed_fresh_claims_once_and_does_not_sleep_when_that_claim_found_jobs():
    """Awake with work: it releases the doorbell at once, so the next enqueue need not ring."""
    claims = []
    w = waiter(listener=Doorbell(Armed.FRESH), claim_once=lambda: claims.append(1) or 5)
    assert timed(w.wait) < LONG / 2
    assert claims == [1] and w.listener.calls == ["arm", "disarm"]


def test_armed_fresh_with_an_empty_claim_sleeps():
    claims = []
    w = waiter(poll=0.1, listener=Doorbell(Armed.FRESH), claim_once=lambda: claims.append(1) or 0)
    assert timed(w.wait) >= 0.09
    assert claims == [1]


def test_still_armed_sleeps_without_claiming():
    claims = []
    w = waiter(poll=0.1, listener=Doorbell(Armed.STILL), claim_once=lambda: claims.append(1) or 1)
    assert timed(w.wait) >= 0.09
    assert claims == []


def test_jobs_flowing_nap_unarmed():
    w = waiter(listener=Doorbell())
    w.note_claimed(3)
    assert timed(w.wait) < LONG / 2
    assert w.listener.calls == ["disarm"]


def test_no_free_thread_disarms_and_sleeps_until_a_run_ends():
    w = waiter(claims=Claims(free=0), listener=Doorbell())
    later(0.05, w.wake_event.set)
    assert 0.04 <= timed(w.wait) < LONG / 2
    assert w.listener.calls == ["disarm"]


def test_a_rest_is_not_cut_short_by_a_wake_but_by_a_stop():
    w = waiter()
    later(0.01, w.wake_event.set)
    assert timed(lambda: w.wait(0.2)) >= 0.19
    assert w.leases.expired >= 1  # leases kept by our clock meanwhile
    w = waiter()
    later(0.05, w.stopping.set)
    assert timed(lambda: w.wait(LONG)) < LONG / 2


def test_should_wake_on_the_first_end_on_refill_or_when_all_ended():
    w = waiter(held=10, refill=4)
    assert w.should_wake(1) and not w.should_wake(2) and w.should_wake(4)
    w.note_held(20)  # half of what is held
    assert not w.should_wake(4) and w.should_wake(10)
    w = waiter(held=3, refill=8)
    assert w.should_wake(3)  # every held run ended
