"""The loop-lag watchdog: a thread of its own that notices when the event loop of the async
runtime (aio.py) stops turning, names the job whose coroutine blocks it, and keeps the lag that
/livez reports and the heartbeat writes (the worst since the previous one, for pgjobs_health).
The loop stamps a beat every INTERVAL; the watchdog reads how late it is."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("django_pgjobs.worker")

INTERVAL = 0.05  # seconds between two beats of the loop
WARN_AFTER = 0.5  # seconds of lag that make a warning


class LoopWatch:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        culprit: Callable[[], str | None],
        *,
        warn_after: float = WARN_AFTER,
    ) -> None:
        self.loop = loop
        self.culprit = culprit  # the job whose coroutine runs now, if any
        self.warn_after = warn_after
        self.lag = 0.0  # seconds the loop is late now
        self.max_lag = 0.0  # the worst lag seen since start
        self._worst = 0.0  # the worst lag since the last take_worst()
        self._worst_lock = threading.Lock()
        self._beat = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pgjobs-loopwatch", daemon=True)
        self._blocked: tuple[str, float] | None = None  # (culprit, since) once warned

    def start(self) -> None:
        self.loop.call_soon_threadsafe(self._stamp)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
        self.check(time.monotonic())  # a block that just ended is said before the exit

    def take_worst(self) -> float:
        """The worst lag since the previous call (the heartbeat's), the current one included."""
        with self._worst_lock:
            worst, self._worst = max(self._worst, self.lag), self.lag
        return worst

    def _stamp(self) -> None:  # on the loop
        self._beat = time.monotonic()
        self.loop.call_later(INTERVAL, self._stamp)

    def _watch(self) -> None:
        while not self._stop.wait(INTERVAL):
            self.check(time.monotonic())

    def check(self, now: float) -> None:
        """One look: warn once when the loop is blocked, say when it turns again."""
        self.lag = lag = max(0.0, now - self._beat - INTERVAL)
        self.max_lag = max(self.max_lag, lag)
        with self._worst_lock:
            self._worst = max(self._worst, lag)
        if lag >= self.warn_after and self._blocked is None:
            culprit = self.culprit() or "no job (a callback of the loop)"
            self._blocked = (culprit, self._beat + INTERVAL)
            logger.warning(
                "worker.loop_blocked the event loop of async handlers is blocked for %.2fs "
                "by %s: a handler calls blocking code without await (use asyncio or "
                "sync_to_async); heartbeats go on, other async jobs wait",
                lag,
                culprit,
                extra={"action": "worker.loop_blocked", "blocked_by": culprit},
            )
        elif lag < self.warn_after and self._blocked is not None:
            culprit, since = self._blocked
            self._blocked = None
            logger.warning(
                "worker.loop_unblocked the event loop was blocked for %.2fs by %s",
                self._beat - since,
                culprit,
                extra={"action": "worker.loop_unblocked", "blocked_by": culprit},
            )
