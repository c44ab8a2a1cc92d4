"""The progress writer, on the claim thread: the latest ``job.progress(...)`` of each job this
worker runs, written at most once per ``progress.WRITE_INTERVAL`` for all of them, in one
statement fenced by their leases (queries.write_progress). A handler only hands its job over
(``report``, no database, no wait); the last value also rides with the job's outcome."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from .. import queries
from ..context import JobContext
from ..progress import WRITE_INTERVAL


class ProgressWriter:
    def __init__(self, using: str, wake: Callable[[], None]) -> None:
        self.using = using
        self.wake = wake  # the loop's: the first report after a write wakes it
        self._dirty: dict[int, JobContext] = {}
        self._lock = threading.Lock()
        self._next = 0.0  # monotonic: no write before
        self.writes = 0  # statements sent

    def report(self, job: JobContext) -> None:
        """A handler reported progress (its thread): write it soon."""
        with self._lock:
            first = not self._dirty
            self._dirty[job.id] = job
        if first:
            self.wake()

    def until_due(self, now: float) -> float:
        """Seconds until the next write (inf: nothing to write)."""
        return max(0.0, self._next - now) if self._dirty else math.inf

    def write_if_due(self, now: float) -> None:
        if not self._dirty or now < self._next:
            return
        with self._lock:
            jobs, self._dirty = list(self._dirty.values()), {}
        # A job whose outcome was handed over (progress detached) sends its last value with it.
        reports = [
            (j.id, j.lease_text, j.progress_record(now))
            for j in jobs
            if j.progress_attached and not j.lease_marked_lost
        ]
        self._next = now + WRITE_INTERVAL
        if not reports:
            return
        try:
            queries.write_progress(reports, using=self.using)  # type: ignore[arg-type]
        except BaseException:
            with self._lock:  # written at the next try, unless a newer report came meanwhile
                for job in jobs:
                    self._dirty.setdefault(job.id, job)
            raise
        self.writes += 1
