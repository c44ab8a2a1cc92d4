"""The executor threads: each takes claimed jobs from the handoff, runs them (executor.py) and
hands each outcome to the completer, waking the claim loop when it is time to write (Waiter).
With ``inline`` (testing.run_jobs) there are none: the loop runs each job itself."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from .. import signals
from . import executor
from .completer import Completer, send_robust
from .handoff import Handoff
from .progress import ProgressWriter
from .slots import InFlight, Slots
from .waiter import Waiter

logger = logging.getLogger("django_pgjobs.worker")


class Runner:
    def __init__(
        self,
        *,
        slots: Slots,
        handoff: Handoff[InFlight],
        completer: Completer,
        progress: ProgressWriter,
        waiter: Waiter,
        wake: Callable[[], None],
        using: str,
        inline: bool,
    ) -> None:
        self.slots = slots
        self.handoff = handoff
        self.completer = completer
        self.progress = progress
        self.waiter = waiter
        self.wake = wake  # the loop's
        self.using = using
        self.inline = inline
        self.threads: list[threading.Thread] = []

    def start(self, n: int) -> None:
        for i in range(n):
            t = threading.Thread(target=self._thread, name=f"pgjobs-exec-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def join(self, deadline: float) -> None:
        """Once the handoff is closed: wait until ``deadline`` (monotonic) for the threads."""
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def run_item(self, item: InFlight) -> None:
        """Run one claimed job on the calling thread: an executor thread, or the caller of
        run_once() with ``inline`` (testing.run_jobs)."""
        if not self.slots.start(item, time.monotonic()):  # released by a shutdown meanwhile
            return
        job = item.job
        job.attach_progress(self.progress.report)
        try:
            if logger.isEnabledFor(logging.DEBUG):  # at INFO the one line per job is its outcome
                logger.debug(
                    "job.started %s#%s queue=%s attempt=%s/%s trace_id=%s",
                    job.type,
                    job.id,
                    job.queue,
                    job.attempts,
                    job.max_attempts,
                    job.trace_id,
                    extra={
                        "action": "job.started",
                        "job_id": job.id,
                        "job_type": job.type,
                        "trace_id": job.trace_id,
                    },
                )
            send_robust(signals.job_started, sender=job.type, job=job)
            completion = executor.execute(item.spec, job, using=self.using, inline=self.inline)
        except Exception as exc:  # noqa: BLE001 - a bug of ours fails the job, not the thread
            logger.exception(
                "job %s#%s: the worker failed around its run",
                job.type,
                job.id,
                extra={"action": "worker.run_error", "job_id": job.id},
            )
            completion = executor.outcome_of_error(item.spec, job, exc, 0)
        self.handoff.ran(job.type, time.monotonic() - item.started_at)
        if not self.slots.finish(item):  # timed out: its outcome is written already
            self.wake()
            return
        ended = self.completer.put(item, completion)
        if self.waiter.should_wake(ended):
            self.wake()

    def _thread(self) -> None:
        while True:
            item = self.handoff.get()
            if item is None:  # closed by the shutdown
                connections.close_all()  # this thread's own connections
                return
            self.run_item(item)
