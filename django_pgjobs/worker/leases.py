"""The lease keeper, on the claim thread: renews the leases of the jobs held (every third of
the lease), notices the lost ones and cancel requests, ends runs past their timeout, and keeps
the worker's row alive. Nothing else runs between two of its beats but claims and finalizes.

A lease not renewed within its length is lost by the worker's own clock, whether or not the
database can say so (a worker cut off from it): the handler sees ``job.lease_lost``, the lease
is no longer renewed, the run's outcome is discarded and a job no thread started is dropped.
The reaper of any worker gives the job to another run."""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable

from .. import queries
from ..exceptions import JobTimeout
from ..queries import Completion
from ..sql import workers
from . import executor
from .options import WorkerOptions
from .slots import InFlight, Slots

logger = logging.getLogger("django_pgjobs.worker")


class LeaseKeeper:
    def __init__(
        self,
        worker_id: str,
        options: WorkerOptions,
        slots: Slots,
        finished: Callable[[InFlight, Completion], int],
        jobs_done: Callable[[], int],
        loop_lag: Callable[[], float | None] = lambda: None,
    ):
        self.worker_id = worker_id
        self.options = options
        self.slots = slots
        self.finished = finished  # the completer's put()
        self.jobs_done = jobs_done
        self.loop_lag = loop_lag  # the event loop's worst lag since the last beat (None: none)
        self.period = options.lease_seconds / 3
        self._last = 0.0

    def until_due(self, now: float) -> float:
        """Seconds until the next beat (0: due)."""
        return max(0.0, self._last + self.period - now)

    def beat_if_due(self, now: float) -> None:
        if now - self._last >= self.period:
            self.end_overdue(now)
            self.renew()
            self._last = now

    def end_overdue(self, now: float) -> None:
        """Record a timeout for each run past its deadline; its thread is abandoned."""
        for item in self.slots.abandon_overdue(now):
            exc = JobTimeout(
                f"handler ran longer than its timeout of {item.spec.effective_timeout()}s"
            )
            self.finished(
                item,
                executor.outcome_of_error(
                    item.spec, item.job, exc, int((now - item.started_at) * 1000)
                ),
            )

    def until_lost(self, now: float) -> float:
        """Seconds until the first lease held runs out by our clock (inf: none held)."""
        return max(
            0.0,
            min(
                (i.job.lease_until for i in self.slots.all() if not i.job.lease_marked_lost),
                default=math.inf,
            )
            - now,
        )

    def expire_unrenewed(self, now: float) -> None:
        """Mark lost the leases not renewed within their length, by our clock (see above):
        of every job held, its run ended or not (its outcome is not written yet)."""
        expired = [
            i for i in self.slots.all() if i.job.lease_until <= now and not i.job.lease_marked_lost
        ]
        for item in expired:
            item.job.lose_lease()
            logger.warning(
                "job.lease_lost %s#%s: its lease was not renewed for %.1fs (the lease is %ss); "
                "the handler sees job.lease_lost, its outcome will be discarded",
                item.job.type,
                item.job.id,
                now - item.job.lease_until + self.options.lease_seconds,
                self.options.lease_seconds,
                extra={"action": "job.lease_lost", "job_id": item.job.id},
            )
        unstarted = self.slots.release(expired)  # waiting for a thread: none will run them
        self.slots.remove([i.job.id for i in unstarted])

    def renew(self) -> None:
        o = self.options
        items = [i for i in self.slots.held() if not i.job.lease_lost]
        if items:
            sent = time.monotonic()  # the database's new expiry is later than sent + lease
            held = queries.heartbeat(
                [(i.job.id, i.job.lease_text) for i in items], o.lease_seconds, using=o.using
            )
            for item in items:
                if item.job.id in held:
                    item.job.set_cancel_requested(held[item.job.id])
                    item.job.renewed(sent + o.lease_seconds)
                elif not item.job.lease_marked_lost:
                    item.job.lose_lease()
                    logger.warning(
                        "job.lease_lost %s#%s: another worker or the reaper took it over; its "
                        "outcome will be discarded",
                        item.job.type,
                        item.job.id,
                        extra={"action": "job.lease_lost", "job_id": item.job.id},
                    )
        workers.upsert_worker(
            worker_id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=o.queues or ["*"],
            concurrency=o.concurrency,
            jobs_done=self.jobs_done(),
            lease_seconds=o.lease_seconds,
            loop_lag_seconds=self.loop_lag(),
            using=o.using,
        )
