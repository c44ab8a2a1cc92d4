"""How claimed jobs reach the executor threads.

Waking a thread costs more than a short job (docs/performance.md has the figures). So a batch
wakes ONE idle thread, which runs the batch's jobs
one after another while they are short; other idle threads are woken

- as soon as a job starts whose type usually runs longer than ``short`` (or has not run here
  yet): the jobs behind it get threads at once, as with one handoff per job;
- by ``spread()``, which the worker's main loop calls while it waits: one more thread each time
  the queue has not moved for ``grace`` seconds (a short type that ran long this time; the
  thread that took it is stuck in it). A queue that moves is left to its thread: on a busy
  machine, waking more threads would only add switches.

So the jobs behind a stuck one get a thread within ``grace`` (plus the main loop's wake-up),
and a drain of short jobs costs no thread switch per job.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

GRACE = 0.001  # seconds the queue may stand still while a thread is idle
SHORT = 0.001  # typical run time (seconds) under which a job type shares a woken thread
_EWMA = 0.25  # weight of the newest run in a type's typical run time


class Handoff(Generic[T]):
    def __init__(self, *, grace: float = GRACE, short: float = SHORT) -> None:
        self.grace = grace
        self.short = short
        self._cv = threading.Condition()
        self._items: deque[tuple[str, T]] = deque()  # (job type, item)
        self._idle = 0  # threads waiting in get() and not yet notified
        self._moved = 0.0  # when the queue last moved: a job taken, a batch queued, a spread
        self._closed = False
        self._typical: dict[str, float] = {}  # job type -> typical run time (EWMA, seconds)

    def put_many(self, items: list[tuple[str, T]]) -> None:
        """Queue (job type, item) pairs; wakes one idle thread."""
        if not items:
            return
        with self._cv:
            if not self._items:
                self._moved = time.monotonic()
            self._items.extend(items)
            self._notify(1)

    def get(self) -> T | None:
        """The next item, waiting for one; None once closed and empty (the thread exits)."""
        with self._cv:
            while not self._items:
                if self._closed:
                    return None
                self._idle += 1
                self._cv.wait()
            kind, item = self._items.popleft()
            self._moved = time.monotonic()
            if self._items and not self.is_short(kind):
                self._notify(len(self._items))  # this one may take a while: share the rest
            return item

    def spread(self) -> float:
        """Wake one more idle thread if the queue has not moved for ``grace``; returns the
        seconds until this needs checking again (inf when nothing waits or no thread is idle)."""
        with self._cv:
            if not self._items or not self._idle:
                return float("inf")
            now = time.monotonic()
            still = now - self._moved
            if still < self.grace:
                return self.grace - still
            self._notify(1)
            self._moved = now  # the next one only if this one gets stuck too
            return self.grace if self._idle else float("inf")

    def take_back(self) -> list[T]:
        """Remove every queued item that no thread has taken yet (in queue order)."""
        with self._cv:
            items = [item for _, item in self._items]
            self._items.clear()
            return items

    def stuck_for(self) -> float:
        """Seconds the queue has stood still with items waiting and no idle thread left to take
        them (every thread busy); 0 otherwise."""
        with self._cv:
            if not self._items or self._idle:
                return 0.0
            return time.monotonic() - self._moved

    def ran(self, kind: str, seconds: float) -> None:
        """Record how long a job of this type ran (feeds ``is_short``)."""
        typical = self._typical.get(kind)
        self._typical[kind] = seconds if typical is None else typical + (seconds - typical) * _EWMA

    def is_short(self, kind: str) -> bool:
        typical = self._typical.get(kind)
        return typical is not None and typical < self.short

    def close(self) -> None:
        """Let every thread finish what is queued, then return None from get()."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _notify(self, n: int) -> None:
        n = min(n, self._idle)
        if n > 0:
            self._idle -= n  # counted off now: a second call cannot wake the same thread
            self._cv.notify(n)
