"""The worker, the composition root: it builds the parts, starts them, and runs the pipeline.

    run()
      start()              signals (interrupts.py), executor threads (runner.py), listener,
                           services (queue controls and the reaper run once first), health
      while running:
        run_once()         one step; a step that fails is the guard's (guard.py)
          leases           heartbeat + timeouts when due (leases.py)
          cycle            ONE round trip: write the runs that ended and claim as many jobs
                           as that frees (cycle.py: producer.py, completer.py)
        waiter.wait()      NOTIFY, enough finished runs (a 2 ms batching window), the poll
                           interval, the next heartbeat, or the guard's rest (waiter.py)
      shutdown()           release unstarted jobs, drain running ones (heartbeating), release
                           what is left, remove the worker row (shutdown.py)

The main thread owns the conversation about job state; ``concurrency`` daemon threads run
handlers (runner.py, executor.py), each with its own connection; claimed jobs reach them
through a Handoff. Who writes a job's outcome: completer.py. What a failed step does: guard.py
(database errors through one ErrorPolicy, policy.py). Whether the worker is stopping, its exit
code and the claim thread's wake-up: run_state.py. Maintenance (reaper, cron, pruning,
rollups) runs on the services thread (services.py, maintenance.py) with its own connection: no
pass can delay a heartbeat or a claim.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from .. import conf, health, registry, rollup, signals
from . import aio, cycle, maintenance, pooler, shutdown
from .completer import Completer
from .guard import StepGuard
from .handoff import Handoff
from .interrupts import Interrupts
from .leases import LeaseKeeper
from .listener import Listener
from .options import WorkerOptions
from .producer import Producer
from .progress import ProgressWriter
from .run_state import RunState
from .runner import Runner
from .services import ServiceRunner
from .session import Session
from .slots import InFlight, Slots
from .unknown_types import BurstReport
from .waiter import Waiter

logger = logging.getLogger("django_pgjobs.worker")

FIRST_SERVICES = ("queue_controls", "reaper")  # before the first claim


class Worker:
    def __init__(self, options: WorkerOptions | None = None):
        self.options = o = options or WorkerOptions.from_settings()
        if o.concurrency < 1 or o.batch_size < 1 or o.prefetch < 0:
            raise ValueError("concurrency and batch_size must be >= 1, prefetch >= 0")
        self.worker_id = o.worker_id or default_worker_id()
        self.using = o.using
        self.state = RunState()  # stopping, the exit code, the claim thread's wake-up
        self.session = Session(self.worker_id, o.using, o.inline)  # tags, keepalives, plans
        self.slots = Slots()
        self.recorder = rollup.Recorder()  # the dashboard's counts
        self.completer = Completer(self.slots, self.recorder, o.using)
        self.handoff: Handoff[InFlight] = Handoff()  # claimed jobs -> executor threads
        self.producer = Producer(self.worker_id, o, self.slots, self.handoff, self.completer.put)
        self.leases = LeaseKeeper(
            self.worker_id,
            o,
            self.slots,
            self.completer.put,
            lambda: self.completer.total,
            self._loop_lag,
        )
        self.services = ServiceRunner(maintenance.services_for(o, self.recorder, self._limited))
        self.progress = ProgressWriter(o.using, self.state.wake)
        self.guard = StepGuard(o, self.state, self.completer)  # failed steps, the verdicts
        self.interrupts = Interrupts(self.state, self.slots, self.worker_id, o)  # SIGTERM, SIGINT
        # A burst worker names unknown due types itself (a long-lived one: its services).
        self._unknown = BurstReport(o.using) if o.burst and not o.inline else None
        self.listener: Listener | None = None  # started with the worker when it listens
        self.health_server: health.HealthServer | None = None
        self.waiter = Waiter(
            poll_interval=o.poll_interval,
            refill=min(o.batch_size, o.concurrency),
            wake=self.state.woken,
            stopping=self.state.stopping,
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
            wake=self.state.wake,
            using=o.using,
            inline=o.inline,
        )
        self.aio: aio.AsyncRuntime | None = None  # async def handlers' event loop, at start()
        self.last_step_at = time.monotonic()  # /livez: the loop keeps stepping

    @property
    def claimed_total(self) -> int:
        return self.producer.claimed_total

    @property
    def finished_total(self) -> int:
        return self.completer.total

    @property
    def exit_code(self) -> int:
        return self.state.exit_code

    # --- public -------------------------------------------------------------------------------

    def run(self) -> int:
        """Process jobs until stopped (or, with burst/max_jobs, until done); the exit code."""
        self.start()
        try:
            while not self.state.is_stopping:
                self.run_once()
                if self._done():
                    self._report_unknown_left()
                    break
                self.waiter.wait(self.guard.rest())
        finally:
            self.shutdown()
        return self.exit_code

    def run_once(self) -> int:
        """One step of the loop; returns how many jobs were claimed. A step that fails is the
        guard's: it survives database outages, outcomes the database refuses, and bugs."""
        return self.guard.run(self._step)

    def stop(self) -> None:
        """Begin a graceful shutdown (what the first SIGTERM/SIGINT does)."""
        self.state.stop()

    def wake(self) -> None:
        self.state.wake()

    # --- the step -----------------------------------------------------------------------------

    def _step(self) -> int:
        self.last_step_at = now = time.monotonic()
        o = self.options
        self.leases.expire_unrenewed(now)  # before anything that may wait on the network
        self.session.prepare()
        if o.inline:  # run_jobs(): no services thread, the caller's transaction
            self.services.run_due(now)
        self.leases.beat_if_due(now)
        if self.slots.timed:  # timeouts within moments of their value, not at the next beat
            self.leases.end_overdue(now)
        self.progress.write_if_due(now)
        self.guard.stop_if_stuck(self.slots.zombies)
        if o.prefetch and not o.inline:
            self.producer.release_held()
        claimed = self.cycle()
        self.waiter.note_claimed(claimed)
        if self._unknown is not None and not self._unknown.first_done:
            self._unknown.after_first_claim()
        return claimed

    def cycle(self) -> int:
        """Write the runs that ended and claim as many jobs as that frees, in one round trip."""
        return cycle.cycle(self)

    def _done(self) -> bool:
        o = self.options
        idle = len(self.slots) == 0 and self.completer.idle()
        if o.max_jobs is not None and self.claimed_total >= o.max_jobs and idle:
            return True
        if o.burst and idle and not self.producer.last_claim_full and not self.guard.resting:
            # Nothing in flight and the last claim came back short: is anything still due?
            # (Not knowable while the database fails: then back off and ask again.) Jobs a
            # rate holds back are: the burst waits for their next start (next_start_at).
            return (
                self.run_once() == 0
                and len(self.slots) == 0
                and not self.guard.resting
                and self.producer.next_start_at is None
            )
        return False

    def _report_unknown_left(self) -> None:
        if self._unknown is not None and not self.exit_code:
            self._unknown.at_end()

    # --- start / stop -------------------------------------------------------------------------

    def start(self) -> None:
        o = self.options
        self.producer.types = registry.registered_types()
        self.session.open()
        if o.install_signal_handlers:
            self.interrupts.install()
        self.runner.start(0 if o.inline else o.concurrency)
        self.aio = aio.start_for(self)
        self.listener = self.waiter.listener = start_listener(o, self.session, self.wake)
        signals.job_reaped.connect(
            self.recorder.on_reaped, weak=False, dispatch_uid=("pgjobs.worker", id(self))
        )
        self.services.run_now(FIRST_SERVICES)  # capped queues known, crashed work rescued
        if not o.inline:
            self.services.start()
        if o.health_port is not None:
            self.health_server = health.HealthServer(self, o.health_host, o.health_port).start()
        log_started(self.worker_id, o, self.producer.types)

    def shutdown(self) -> None:
        """Release unstarted jobs, let running ones finish (heartbeating), release the rest."""
        shutdown.stop_gracefully(self)

    def _limited(self, queues: list[str]) -> None:
        self.producer.limited = queues

    def _loop_lag(self) -> float | None:
        """The heartbeat's figure: the event loop's worst lag since the last (None: no loop)."""
        return None if self.aio is None else round(self.aio.watch.take_worst(), 3)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def start_listener(o: WorkerOptions, session: Session, wake: Callable[[], None]) -> Listener | None:
    """The LISTEN connection's thread, started; None when this worker polls (burst, --no-listen,
    or a transaction pooler that cannot LISTEN: pooler.py)."""
    listen = o.listen and not o.burst
    if not o.inline:  # the caller's connection (run_jobs) is not ours to probe
        listen = pooler.check_at_start(o.using, listen=listen, poll_interval=o.poll_interval)
    if not listen:
        return None
    listener = Listener(
        alias=o.using,
        channel=conf.get("NOTIFY_CHANNEL"),
        queues=o.queues,
        wake=wake,
        application_name=session.app_name("listen"),
    )
    listener.start()
    return listener


def log_started(worker_id: str, o: WorkerOptions, types: list[str]) -> None:
    logger.info(
        "worker %s started: queues=%s concurrency=%s batch=%s types=%s",
        worker_id,
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
