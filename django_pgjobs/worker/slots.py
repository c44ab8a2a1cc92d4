"""The jobs a worker holds, and every change of their in-memory state, in one place.

    QUEUED --start--> STARTED --finish--> DONE         (the completer writes the outcome)
      |                  '--abandon--> ABANDONED       (timed out, or still running at shutdown)
      '--release--> RELEASED                           (given back unstarted, attempt refunded)

A job leaves the table once its outcome is written (or it was given back). The main thread,
the executor threads and the event loop (aio.py) change states: each item has its own lock, the
table another. An abandoned coroutine is not a zombie thread: ``zombies`` counts threads only.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from ..context import JobContext
from ..registry import HandlerSpec

QUEUED, STARTED, DONE, RELEASED, ABANDONED = "queued", "started", "done", "released", "abandoned"
# The main thread's backstop for an async run past its timeout: the event loop cancels it at the
# timeout and gets CANCEL_GRACE to see it end (aio.py); this, twice that, covers a blocked loop.
ASYNC_TIMEOUT_GRACE = 2.0


@dataclass(eq=False, slots=True)
class InFlight:
    job: JobContext
    spec: HandlerSpec
    state: str = QUEUED
    started_at: float = 0.0
    deadline: float | None = None  # monotonic; None: no timeout
    lock: threading.Lock = field(default_factory=threading.Lock)


class Slots:
    def __init__(self) -> None:
        self._items: dict[int, InFlight] = {}
        self._lock = threading.Lock()
        self.zombies = 0  # abandoned runs whose thread is still stuck in the handler
        self.timed = 0  # jobs held with a timeout: only then are deadlines looked at
        self.n_async = 0  # jobs held that run on the event loop (aio.py), not on a thread

    def __len__(self) -> int:
        return len(self._items)

    def add(self, items: list[InFlight]) -> None:
        with self._lock:
            for item in items:
                self._items[item.job.id] = item
                self.timed += item.deadline is not None
                self.n_async += item.spec.is_async

    def remove(self, ids: list[int]) -> None:
        with self._lock:
            for job_id in ids:
                item = self._items.pop(job_id, None)
                if item is None:
                    continue
                self.timed -= item.deadline is not None
                self.n_async -= item.spec.is_async

    def all(self) -> list[InFlight]:
        with self._lock:
            return list(self._items.values())

    def held(self) -> list[InFlight]:
        """The jobs whose lease we renew: claimed and not yet ended."""
        return [i for i in self.all() if i.state in (QUEUED, STARTED)]

    def start(self, item: InFlight, now: float) -> bool:
        """QUEUED -> STARTED on an executor thread; False if it was released meanwhile."""
        with item.lock:
            if item.state != QUEUED:
                return False
            item.state = STARTED
            item.started_at = now
            if item.deadline is not None:
                grace = ASYNC_TIMEOUT_GRACE if item.spec.is_async else 0.0
                item.deadline = now + (item.spec.effective_timeout() or 0) + grace
            return True

    def finish(self, item: InFlight) -> bool:
        """STARTED -> DONE when the handler returned; False if it had been abandoned (its
        outcome was already decided, and its thread is free again)."""
        with item.lock:
            if item.state == ABANDONED:
                if not item.spec.is_async:
                    with self._lock:
                        self.zombies -= 1
                return False
            item.state = DONE
            return True

    def until_deadline(self, now: float) -> float:
        """Seconds until the first timeout of a running job (inf: none)."""
        if not self.timed:
            return math.inf
        deadlines = [
            i.deadline for i in self.all() if i.deadline is not None and i.state == STARTED
        ]
        return max(0.0, min(deadlines) - now) if deadlines else math.inf

    def abandon_overdue(self, now: float) -> list[InFlight]:
        """STARTED -> ABANDONED for the runs past their deadline (their threads become zombies)."""
        overdue = []
        for item in self.all():
            if item.deadline is None or now < item.deadline:
                continue
            with item.lock:
                if item.state != STARTED:
                    continue
                item.state = ABANDONED
            overdue.append(item)
        with self._lock:
            self.zombies += sum(not i.spec.is_async for i in overdue)
        return overdue

    def abandon(self, item: InFlight) -> bool:
        """STARTED -> ABANDONED for one coroutine that ignored its cancel (aio.py); False if
        its run had ended or was abandoned already."""
        with item.lock:
            if item.state != STARTED:
                return False
            item.state = ABANDONED
            return True

    def abandon_running(self) -> list[InFlight]:
        """STARTED -> ABANDONED at the end of a shutdown: released while their handlers run on."""
        stuck = []
        for item in self.all():
            with item.lock:
                if item.state == STARTED:
                    item.state = ABANDONED
                    stuck.append(item)
        return stuck

    def release(self, items: list[InFlight]) -> list[InFlight]:
        """QUEUED -> RELEASED for those of ``items`` no thread has started."""
        released = []
        for item in items:
            with item.lock:
                if item.state == QUEUED:
                    item.state = RELEASED
                    released.append(item)
        return released

    def unrelease(self, items: list[InFlight]) -> None:
        """RELEASED -> QUEUED: the database did not take them back, they are still ours."""
        for item in items:
            with item.lock:
                item.state = QUEUED
