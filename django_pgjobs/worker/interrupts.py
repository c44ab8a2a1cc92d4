"""SIGTERM and SIGINT on a worker: the first begins the graceful stop (shutdown.py); the
second releases every job the worker holds in one bounded statement (last_release.py) and
exits at once with 128 + the signal's number."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

from . import last_release
from .options import WorkerOptions
from .run_state import RunState
from .slots import Slots

logger = logging.getLogger("django_pgjobs.worker")


class Interrupts:
    def __init__(self, state: RunState, slots: Slots, worker_id: str, o: WorkerOptions) -> None:
        self.state = state
        self.slots = slots
        self.worker_id = worker_id
        self.using = o.using
        self.shutdown_timeout = o.shutdown_timeout
        self.seen = 0  # signals received

    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on (only the main thread may)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.received)
            signal.signal(signal.SIGINT, self.received)

    def received(self, signum: int, frame: FrameType | None = None) -> None:
        self.seen += 1
        name = signal.Signals(signum).name
        if self.seen == 1:
            logger.warning(
                "received %s: finishing running jobs (up to %ss); send it again to exit at once",
                name,
                self.shutdown_timeout,
                extra={"action": "worker.stopping"},
            )
            self.state.stop()
            return
        logger.error(
            "received %s again: releasing the jobs this worker holds, then exiting",
            name,
            extra={"action": "worker.killed"},
        )
        last_release.release_held(
            self.slots,
            self.using,
            reason=f"interrupted: worker {self.worker_id} received {name} twice",
        )
        os._exit(128 + signum)
