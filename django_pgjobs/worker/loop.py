"""The worker, the composition root: it builds the parts, starts them, and runs the pipeline.

    run()
      start()              signals, executor threads (runner.py), listener, services (queue
                           controls and the reaper run once first), health server
      while running:
        run_once()
          leases           heartbeat + timeouts when due (leases.py)
          cycle            ONE round trip: write the runs that ended and claim as many jobs
                           as that frees (producer.py, completer.py); capped queues first
        waiter.wait()      NOTIFY, enough finished runs (a 2 ms batching window), the poll
                           interval, the next heartbeat, or the database backoff (waiter.py)
      shutdown()           release unstarted jobs, drain running ones (heartbeating), release
                           what is left, remove the worker row (shutdown.py)

The main thread owns the conversation about job state; ``concurrency`` daemon threads run
handlers (runner.py, executor.py), each with its own connection; claimed jobs reach them
through a Handoff. Who writes a job's outcome: completer.py. Database errors: one ErrorPolicy
(policy.py). Maintenance (reaper, cron, pruning, rollups) runs on the services thread
(services.py, maintenance.py) with its own connection: no pass can delay a heartbeat or a claim.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any

from django.db import InterfaceError, OperationalError

from .. import conf, health, registry, rollup, signals
from . import last_release, maintenance, pooler, shutdown
from .completer import REFUSED, Completer
from .handoff import Handoff
from .leases import LeaseKeeper
from .listener import Listener
from .options import WorkerOptions
from .policy import EXIT_DATABASE_UNREACHABLE, ErrorPolicy
from .producer import Producer
from .progress import ProgressWriter
from .runner import Runner
from .services import ServiceRunner
from .session import Session
from .slots import InFlight, Slots
from .unknown_types import BurstReport
from .waiter import Waiter

logger = logging.getLogger("django_pgjobs.worker")

STEP_ERROR_PAUSE = 1.0  # seconds the loop rests after an unexpected error in a step
FIRST_SERVICES = ("queue_controls", "reaper")  # before the first claim


class Worker:
    def __init__(self, options: WorkerOptions | None = None):
        self.options = o = options or WorkerOptions.from_settings()
        if o.concurrency < 1 or o.batch_size < 1 or o.prefetch < 0:
            raise ValueError("concurrency and batch_size must be >= 1, prefetch >= 0")
        self.worker_id = (
            o.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self.using = o.using
        self.session = Session(self.worker_id, o.using, o.inline)  # tags, keepalives, plans
        self.slots = Slots()
        self.recorder = rollup.Recorder()  # the dashboard's counts
        self.completer = Completer(self.slots, self.recorder, o.using)
        self.handoff: Handoff[InFlight] = Handoff()  # claimed jobs -> executor threads
        self.producer = Producer(self.worker_id, o, self.slots, self.handoff, self.completer.put)
        self.leases = LeaseKeeper(
            self.worker_id, o, self.slots, self.completer.put, lambda: self.completer.total
        )
        self.services = ServiceRunner(maintenance.services_for(o, self.recorder, self._limited))
        self._wake = threading.Event()
        self.progress = ProgressWriter(o.using, self.wake)
        self._stopping = threading.Event()
        self._signals_seen = 0
        self._stop_error_logged = False  # _log_stopping_error
        # A burst worker names unknown due types itself (a long-lived one: its services).
        self._unknown = BurstReport(o.using) if o.burst and not o.inline else None
        self._listener: Listener | None = None
        self._health: health.HealthServer | None = None
        self.policy = ErrorPolicy(o.using)  # database errors: backoff, outage, give up
        self._pause = 0.0  # after an unexpected error
        self.waiter = Waiter(
            poll_interval=o.poll_interval,
            refill=min(o.batch_size, o.concurrency),
            wake=self._wake,
            stopping=self._stopping,
            slots=self.slots,
            completer=self.completer,
            producer=self.producer,
            leases=self.leases,
            progress=self.progress,
            handoff=self.handoff,
            claim_once=self.run_once,
        )
        self.runner = Runner(  # the executor threads
            slots=self.slots,
            handoff=self.handoff,
            completer=self.completer,
            progress=self.progress,
            waiter=self.waiter,
            wake=self._wake.set,
            using=o.using,
            inline=o.inline,
        )
        self.exit_code = 0
        self.last_step_at = time.monotonic()  # /livez: the loop keeps stepping

    @property
    def claimed_total(self) -> int:
        return self.producer.claimed_total

    @property
    def finished_total(self) -> int:
        return self.completer.total

    # --- public -------------------------------------------------------------------------------

    def run(self) -> int:
        """Process jobs until stopped (or, with burst/max_jobs, until done); the exit code."""
        self.start()
        try:
            while not self._stopping.is_set():
                self.run_once()
                if self._done():
                    self._report_unknown_left()
                    break
                self._wait()
        finally:
            self.shutdown()
        return self.exit_code

    def run_once(self) -> int:
        """One step of the loop; returns how many jobs were claimed. Survives database outages
        and outcomes the database refuses; any other error is logged and the loop rests."""
        self.last_step_at = now = time.monotonic()
        try:
            self.leases.expire_unrenewed(now)  # before anything that may wait on the network
            self.session.prepare()
            if self.options.inline:  # run_jobs(): no services thread, the caller's transaction
                self.services.run_due(now)
            self.leases.beat_if_due(now)
            if self.slots.timed:  # timeouts within moments of their value, not at the next beat
                self.leases.end_overdue(now)
            self.progress.write_if_due(now)
            self._exit_if_stuck()
            if self.options.prefetch and not self.options.inline:
                self.producer.release_held()
            claimed = self.cycle()
            self.waiter.note_claimed(claimed)
            if self._unknown is not None and not self._unknown.first_done:
                self._unknown.after_first_claim()
            if self.policy.down_since is not None:
                self._on_db_back()
            return claimed
        except (OperationalError, InterfaceError) as exc:
            self._on_db_error(exc)
        except REFUSED as exc:
            self._on_refused(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not end the worker
            self._on_step_error(exc)
        return 0

    def stop(self) -> None:
        """Begin a graceful shutdown (what the first SIGTERM/SIGINT does)."""
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    # --- the cycle ----------------------------------------------------------------------------

    def cycle(self) -> int:
        """Write the runs that ended and claim as many jobs as that frees, in one round trip."""
        o = self.options
        batch = self.completer.take()
        free, room = self.producer.room(len(batch))
        limit = 0 if self._stopping.is_set() else min(room, o.batch_size)
        claimed = 0
        if limit > 0 and self.producer.limited:  # capped queues: their own transactions
            self.completer.write(batch)
            batch = []
            claimed = self.producer.claim_limited(min(free, limit))
        unlimited = limit - claimed
        if o.queues and set(o.queues) <= set(self.producer.limited):
            unlimited = 0  # every queue of ours is controlled: no unlimited claim to send
        written, rows = self.producer.finalize_and_claim(Completer.to_write(batch), unlimited)
        if batch:
            self.completer.settle(batch, written)
        self.producer.dispatch(rows)
        claimed += len(rows)
        # Claim again at once only if the batch size, not the room, capped this claim.
        self.producer.last_claim_full = 0 < limit < room and claimed == limit
        self.waiter.note_held(len(self.slots))
        if o.inline:
            for item in self.handoff.take_back():
                self.runner.run_item(item)
        return claimed

    # --- start / stop -------------------------------------------------------------------------

    def start(self) -> None:
        o = self.options
        self.producer.types = registry.registered_types()
        self.session.open()
        if o.install_signal_handlers and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.runner.start(0 if o.inline else o.concurrency)
        listen = o.listen and not o.burst
        if not o.inline:  # the caller's connection (run_jobs) is not ours to probe
            listen = pooler.check_at_start(self.using, listen=listen, poll_interval=o.poll_interval)
        if listen:
            self._listener = Listener(
                alias=self.using,
                channel=conf.get("NOTIFY_CHANNEL"),
                queues=o.queues,
                wake=self.wake,
                application_name=self.session.app_name("listen"),
            )
            self._listener.start()
            self.waiter.listener = self._listener
        signals.job_reaped.connect(
            self.recorder.on_reaped, weak=False, dispatch_uid=("pgjobs.worker", id(self))
        )
        self.services.run_now(FIRST_SERVICES)  # capped queues known, crashed work rescued
        if not o.inline:
            self.services.start()
        if o.health_port is not None:
            self._health = health.HealthServer(self, o.health_host, o.health_port).start()
        self._log_started()

    def shutdown(self) -> None:
        """Release unstarted jobs, let running ones finish (heartbeating), release the rest."""
        shutdown.stop_gracefully(self)

    def _report_unknown_left(self) -> None:
        if self._unknown is not None and not self.exit_code:
            self._unknown.at_end()

    # --- waiting ------------------------------------------------------------------------------

    def _done(self) -> bool:
        o = self.options
        idle = len(self.slots) == 0 and self.completer.idle()
        if o.max_jobs is not None and self.claimed_total >= o.max_jobs and idle:
            return True
        if (
            o.burst
            and idle
            and not self.producer.last_claim_full
            and not self.policy.backoff
            and not self._pause
        ):
            # Nothing in flight and the last claim came back short: is anything still due?
            # (Not knowable while the database fails: then back off and ask again.) Jobs a
            # rate holds back are: the burst waits for their next start (next_start_at).
            return (
                self.run_once() == 0
                and len(self.slots) == 0
                and not self.policy.backoff
                and not self._pause
                and self.producer.next_start_at is None
            )
        return False

    def _wait(self) -> None:
        rest, self._pause = self.policy.backoff or self._pause, 0.0
        self.waiter.wait(rest)

    # --- errors -------------------------------------------------------------------------------

    def _exit_if_stuck(self) -> None:
        if self.slots.zombies >= self.options.concurrency and not self._stopping.is_set():
            logger.error(
                "every executor thread is stuck in a handler that timed out: stopping so that a "
                "supervisor restarts this worker",
                extra={"action": "worker.stuck"},
            )
            self.exit_code = 3
            self.stop()

    def _on_db_error(self, exc: BaseException) -> None:
        self.policy.failed(time.monotonic())
        if self._stopping.is_set():  # the shutdown's steps say what they do about it
            self._log_stopping_error(exc)
        elif not (self.options.burst and self._give_up(exc)):
            log_db_error(exc, self.policy.backoff)
        self.policy.close_connection()

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

    def _on_db_back(self) -> None:
        logger.warning(
            "database reachable again after %.1fs",
            self.policy.recovered(time.monotonic()) or 0.0,
            extra={"action": "worker.db_back"},
        )

    def _give_up(self, exc: BaseException) -> bool:
        """A burst worker stops once the database stayed unreachable for give_up_after
        seconds (exit code 4): a cron or CI run must not hang. Its last retry is at that time."""
        now = time.monotonic()
        if self.policy.give_up_in(self.options.give_up_after, now) > 0:
            return False
        log_gave_up(now - (self.policy.down_since or now), exc, self.options.give_up_after)
        self.exit_code = EXIT_DATABASE_UNREACHABLE
        self.stop()
        return True

    def _on_refused(self, exc: Exception) -> None:
        """The database refused a write for its data: write the outcomes one by one."""
        if not self.completer.unwritten:  # not an outcome's fault
            self._on_step_error(exc)
            return
        self._guarded(lambda: self.completer.write_singly(exc))

    def _on_step_error(self, exc: Exception) -> None:
        self._pause = STEP_ERROR_PAUSE
        logger.error(
            "unexpected error in the worker loop; going on in %.1fs",
            self._pause,
            exc_info=exc,
            extra={"action": "worker.step_error"},
        )

    def _guarded(self, fn: Any) -> None:
        """``fn()`` under the loop's error policy."""
        try:
            fn()
        except (OperationalError, InterfaceError) as exc:
            self._on_db_error(exc)
        except Exception as exc:  # noqa: BLE001
            self._on_step_error(exc)

    # --- the rest -----------------------------------------------------------------------------

    def _limited(self, queues: list[str]) -> None:
        self.producer.limited = queues

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals_seen += 1
        if self._signals_seen == 1:
            logger.warning(
                "received %s: finishing running jobs (up to %ss); send it again to exit at once",
                signal.Signals(signum).name,
                self.options.shutdown_timeout,
                extra={"action": "worker.stopping"},
            )
            self.stop()
            return
        name = signal.Signals(signum).name
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

    def _log_started(self) -> None:
        o, types = self.options, self.producer.types
        logger.info(
            "worker %s started: queues=%s concurrency=%s batch=%s types=%s",
            self.worker_id,
            ",".join(o.queues) if o.queues else "*",
            o.concurrency,
            o.batch_size,
            ",".join(sorted(types)),
            extra={"action": "worker.started"},
        )
        if not types:
            logger.warning(
                "no job handler is registered: this worker will claim nothing. Define handlers "
                "with @django_pgjobs.handler in a jobs.py module of an installed app",
                extra={"action": "worker.no_handlers"},
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
