"""The claim thread's error handling: what a step that fails does to the worker, and the two
verdicts that end a worker for a failure. One owner for the loop's steps and for shutdown's
writes; the maintenance services have their own (services.py), with the same ErrorPolicy class
(policy.py).

    connection error   the backoff grows (ErrorPolicy), the connection is thrown away, the
                       outcomes stay in memory for the next step; a burst worker gives up once
                       the outage lasted --give-up-after (exit code 4); a stopping worker warns
                       once and retries nothing more than shutdown asks for
    refused outcome    the database refused a batch for its data: its outcomes are written
                       again one by one (Completer.write_singly)
    anything else      logged with its traceback; the loop rests STEP_ERROR_PAUSE
    stuck              every executor thread is stuck in a handler that timed out: the worker
                       stops with exit code 3, for a supervisor to restart it

``run(step)`` runs one loop step under it and ``rest()`` is what the loop waits before the next
one; shutdown writes through ``guarded(fn)`` and ``retry(fn, attempts)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import DatabaseError, InterfaceError, OperationalError

from .completer import REFUSED, Completer
from .options import WorkerOptions
from .policy import EXIT_DATABASE_UNREACHABLE, ErrorPolicy
from .run_state import EXIT_STUCK, RunState

logger = logging.getLogger("django_pgjobs.worker")

STEP_ERROR_PAUSE = 1.0  # seconds the loop rests after an unexpected error in a step
RETRY_WAIT_MAX = 2.0  # seconds at most between two of shutdown's attempts at a write


class StepGuard:
    def __init__(self, options: WorkerOptions, state: RunState, completer: Completer) -> None:
        self.options = options
        self.state = state
        self.completer = completer
        self.policy = ErrorPolicy(options.using)  # backoff and outage of the claim thread
        self._pause = 0.0  # owed after an unexpected error
        self._stop_error_logged = False  # db_error while stopping: one warning

    def run(self, step: Callable[[], int]) -> int:
        """``step()``, which returns how many jobs it claimed; 0 when it failed."""
        try:
            claimed = step()
            if self.policy.down:
                self._back()
            return claimed
        except (OperationalError, InterfaceError) as exc:
            self.db_error(exc)
        except REFUSED as exc:
            self._refused(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not end the worker
            self._unexpected(exc)
        return 0

    @property
    def resting(self) -> bool:
        """A backoff or a pause is owed: the last step failed."""
        return bool(self.policy.backoff or self._pause)

    def rest(self) -> float:
        """Seconds the loop waits before its next step (0: none owed); a pause is owed once."""
        rest, self._pause = self.policy.backoff or self._pause, 0.0
        return rest

    def guarded(self, fn: Callable[[], object]) -> None:
        """``fn()``; a database error backs off, any other is logged (shutdown's drain)."""
        try:
            fn()
        except (OperationalError, InterfaceError) as exc:
            self.db_error(exc)
        except Exception as exc:  # noqa: BLE001
            self._unexpected(exc)

    def retry(self, fn: Callable[[], object], attempts: int) -> None:
        """``fn()`` until it succeeds, ``attempts`` times at most (once after giving up on the
        database), resting the backoff between two (shutdown's writes)."""
        if self.state.exit_code == EXIT_DATABASE_UNREACHABLE:
            attempts = 1
        for i in range(attempts):
            try:
                fn()
                return
            except (OperationalError, InterfaceError, DatabaseError) as exc:
                self.db_error(exc)
                if i + 1 < attempts:
                    time.sleep(min(self.policy.backoff, RETRY_WAIT_MAX))

    def db_error(self, exc: BaseException) -> None:
        """A database error: back off, say so (or give up), throw the connection away."""
        self.policy.failed(time.monotonic())
        if self.state.is_stopping:  # the shutdown's steps say what they do about it
            self._log_stopping_error(exc)
        elif not (self.options.burst and self._give_up(exc)):
            log_db_error(exc, self.policy.backoff)
        self.policy.close_connection()

    def stop_if_stuck(self, zombies: int) -> None:
        """``zombies`` threads are stuck in handlers that timed out: all of them, stop (exit 3)."""
        if zombies >= self.options.concurrency and not self.state.is_stopping:
            logger.error(
                "every executor thread is stuck in a handler that timed out: stopping so that a "
                "supervisor restarts this worker",
                extra={"action": "worker.stuck"},
            )
            self.state.stop(EXIT_STUCK)

    def _give_up(self, exc: BaseException) -> bool:
        """A burst worker stops once the database stayed unreachable for give_up_after
        seconds (exit code 4): a cron or CI run must not hang. Its last retry is at that time."""
        now, bound = time.monotonic(), self.options.give_up_after
        if self.policy.give_up_in(bound, now) > 0:
            return False
        log_gave_up(now - (self.policy.down_since or now), exc, bound)
        self.state.stop(EXIT_DATABASE_UNREACHABLE)
        return True

    def _back(self) -> None:
        logger.warning(
            "database reachable again after %.1fs",
            self.policy.recovered(time.monotonic()) or 0.0,
            extra={"action": "worker.db_back"},
        )

    def _refused(self, exc: Exception) -> None:
        """The database refused a write for its data: write the outcomes one by one."""
        if not self.completer.unwritten:  # not an outcome's fault
            self._unexpected(exc)
            return
        self.guarded(lambda: self.completer.write_singly(exc))

    def _unexpected(self, exc: Exception) -> None:
        self._pause = STEP_ERROR_PAUSE
        logger.error(
            "unexpected error in the worker loop; going on in %.1fs",
            self._pause,
            exc_info=exc,
            extra={"action": "worker.step_error"},
        )

    def _log_stopping_error(self, exc: BaseException) -> None:
        """Once per shutdown: what a stopping worker could not write. No retry is announced:
        after a burst worker's verdict (gave up) it tries each step once only."""
        if self._stop_error_logged:
            return
        self._stop_error_logged = True
        logger.warning(
            "database error while stopping (%s: %s): anything this worker still held "
            "is rescued by the reaper when its lease expires",
            exc.__class__.__name__,
            _one_line(exc, 300),
            extra={"action": "worker.stop_db_error"},
        )


def log_gave_up(down_for: float, exc: BaseException, give_up_after: float) -> None:
    """The verdict of a burst worker that gives up on the database (exit code 4)."""
    logger.error(
        "the database stayed unreachable for %.0fs (%s: %s): giving up, due jobs may be "
        "left (runjobs --burst --give-up-after %g)",
        down_for,
        exc.__class__.__name__,
        _one_line(exc, 300),
        give_up_after,
        extra={"action": "worker.gave_up"},
    )


def log_db_error(exc: BaseException, retry_in: float) -> None:
    logger.error(
        "database error in the worker loop (%s: %s); retrying in %.2fs",
        exc.__class__.__name__,
        _one_line(exc, 500),
        retry_in,
        extra={"action": "worker.db_error"},
    )


def _one_line(exc: BaseException, limit: int) -> str:
    return " ".join(str(exc).split())[:limit]
