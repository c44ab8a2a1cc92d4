"""The waiter, on the claim thread: how long the loop waits between two steps, and for what.

After a step the loop calls ``wait(rest)``:

    rest > 0           a database backoff or a pause after an error: sleep it, keeping the
                       leases' clock (only a stop cuts it short)
    last claim full    no wait: more work is probably due
    nothing ended      hold the doorbell and sleep until a NOTIFY, a run ending, a stop, the
                       next heartbeat, progress write or timeout, or the poll interval
    then               gather a micro-batch: while runs keep ending, give the others a moment
                       (BATCH_WINDOW, at most BATCH_WINDOW_MAX) so one round trip writes them all

Holding the doorbell anew needs one more claim before sleeping (a job committed before it rang
nobody, doorbell.py): that claim is ``claim_once``, the loop's step, called from here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .listener import Armed

if TYPE_CHECKING:
    from .completer import Completer
    from .handoff import Handoff
    from .leases import LeaseKeeper
    from .listener import Listener
    from .producer import Producer
    from .progress import ProgressWriter
    from .slots import InFlight, Slots

BATCH_WINDOW = 0.002  # seconds without another run ending that end a micro-batch
BATCH_WINDOW_MAX = 0.010  # the longest a finished run waits for others to share its round trip
GATE_WAIT = 0.02  # seconds a worker going to sleep waits for the doorbell's gate, then retries
NAP = 0.005  # seconds an idle worker whose last claim found jobs waits before the next, unarmed


class Waiter:
    def __init__(
        self,
        *,
        poll_interval: float,
        refill: int,
        wake: threading.Event,
        stopping: threading.Event,
        slots: Slots,
        completer: Completer,
        producer: Producer,
        leases: LeaseKeeper,
        progress: ProgressWriter,
        handoff: Handoff[InFlight],
        claim_once: Callable[[], int],
    ) -> None:
        self.poll_interval = poll_interval
        self.wake_event = wake
        self.stopping = stopping
        self.slots = slots
        self.completer = completer
        self.producer = producer
        self.leases = leases
        self.progress = progress
        self.handoff = handoff
        self.claim_once = claim_once  # the loop's step: the claim after arming the doorbell
        self.listener: Listener | None = None  # set at start when the worker listens
        self._claimed_last = False  # the last claim found jobs (the doorbell waits: NAP)
        # A finished run wakes the loop, which then waits up to BATCH_WINDOW for the other
        # running jobs to end too (or this many), so that one round trip records them all.
        # With prefetched jobs held, it waits for half of them (see note_held).
        self._base_refill = self._refill = max(1, refill)

    def note_claimed(self, claimed: int) -> None:
        self._claimed_last = claimed > 0

    def note_held(self, held: int) -> None:
        """Wake for the next cycle once half of what is held has ended (or all of it, or the
        micro-batch window closed): the other half keeps the threads busy meanwhile."""
        self._refill = max(self._base_refill, held // 2)

    def should_wake(self, ended: int) -> bool:
        """A run ended and ``ended`` outcomes wait (any thread): is it time to write them?"""
        return ended == 1 or ended >= self._refill or ended >= len(self.slots)  # a hint: no lock

    def wait(self, rest: float = 0.0) -> None:
        """Wait after a step: ``rest`` seconds after an error, else for work (see above)."""
        if rest:
            # Only a stop cuts it short, not a finished run or the (also failing) listener.
            self.sleep_keeping_leases(rest)
            self.wake_event.clear()
            return
        if self.producer.last_claim_full and not self.stopping.is_set():
            return  # more work is probably waiting: claim again at once
        if not self.completer.waiting():
            # Idle until a run ends, a NOTIFY arrives, a stop, the next heartbeat or the poll
            # interval (what finds new jobs while the listener is disconnected).
            now = time.monotonic()
            timeout = min(
                self.poll_interval,
                self.leases.until_due(now),
                self.progress.until_due(now),
                self.slots.until_deadline(now),
                self.producer.until_next_start(now),  # a rate-held queue's next start
            )
            if self._ring_me():
                self.sleep(timeout)
            self.wake_event.clear()
        self._gather_batch()

    def _ring_me(self) -> bool:
        """Before sleeping with a free thread, hold the doorbell (so enqueue rings) and, once
        armed anew, claim once more: a job committed before that rang nobody (doorbell.py).
        False when that claim found work (no sleep)."""
        listener = self.listener
        if listener is None or self.stopping.is_set():
            return True
        if self.producer.room(0)[0] <= 0:  # no free thread: a run that ends wakes the loop
            listener.disarm()
            return True
        if self._claimed_last:  # jobs are flowing: a nap, and the next claim finds the next
            listener.disarm()  # ones; ringing for each would serialize the producers' commits
            self.sleep(min(NAP, self.poll_interval))
            return False
        armed = listener.arm(GATE_WAIT)
        if armed in (Armed.STILL, Armed.DOWN) or self.wake_event.is_set():
            return True  # still armed since the last claim, or polling: sleep
        # FRESH: claim once more. BUSY (a producer's transaction is open): claim too; the
        # listener wakes the loop once the gate passes, for the claim that must follow it.
        if self.claim_once():
            listener.disarm()  # jobs came: awake now, so the next enqueue need not ring
            return False
        return True

    def _gather_batch(self) -> None:
        """While other running jobs keep ending, give them a moment to end too, so that one
        round trip records them all and refills every free thread; a window in which none
        ended (long jobs) ends the wait."""
        ended = self.completer.waiting()
        deadline = time.monotonic() + BATCH_WINDOW_MAX
        while 0 < ended < self._refill and ended < len(self.slots):
            self.sleep(BATCH_WINDOW)
            self.wake_event.clear()
            before, ended = ended, self.completer.waiting()
            if ended == before or time.monotonic() >= deadline:
                break

    def sleep_keeping_leases(self, timeout: float) -> None:
        """Sleep ``timeout`` or until a stop; leases that run out meanwhile are marked lost
        when they do (a database that stays unreachable renews none)."""
        deadline = time.monotonic() + timeout
        while not self.stopping.is_set() and (now := time.monotonic()) < deadline:
            self.sleep(min(deadline - now, self.leases.until_lost(now) + 0.001), self.stopping)
            self.leases.expire_unrenewed(time.monotonic())

    def sleep(self, timeout: float, event: threading.Event | None = None) -> None:
        """Wait for ``event`` (the wake-up) or the timeout; meanwhile wake executor threads for
        jobs left waiting behind a long one (Handoff.spread)."""
        event = event or self.wake_event
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            step = min(left, self.handoff.spread())
            if event.wait(max(0.0, step)) or step >= left:
                return
