"""The worker: claim -> run -> finalize, plus heartbeat, reaper and graceful shutdown.

One main thread owns the database conversation about job state (claim, finalize, heartbeat,
reap, release). ``concurrency`` daemon threads run handlers, each with its own Django
connection for the handler's queries; claimed jobs reach them through a Handoff (handoff.py:
one woken thread per batch of short jobs). A listener thread turns NOTIFY into a wakeup.

    run()
      start()                      signals, threads, listener, health server
      while running:
        run_once()
          maintain()               when due: queue controls, heartbeat + timeouts, reaper,
                                   dashboard rollup, cron scheduler, pruner
          finalize_and_claim()     ONE round trip: record the runs that ended, claim as many
                                   jobs as that frees (capped queues first, on their own)
        _wait()                    NOTIFY, enough finished runs (2 ms batching window), the
                                   poll interval, or the database backoff; meanwhile wakes
                                   threads for jobs left waiting behind a long one
      shutdown()                   release unstarted jobs, drain running ones (heartbeating),
                                   release what is left, remove the worker row
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.signals import connection_created

from .. import (  # observability: /livez /readyz /metrics, rollups
    conf,
    health,
    queries,
    registry,
    retention,
    rollup,
    scheduler,
    signals,
)
from ..context import JobContext
from ..exceptions import JobTimeout
from ..queries import ClaimedRow, Completion
from ..registry import HandlerSpec
from ..status import JobStatus
from . import console, executor
from .handoff import Handoff
from .listener import Listener
from .options import WorkerOptions

logger = logging.getLogger("django_pgjobs.worker")

QUEUED, STARTED, DONE, RELEASED, ABANDONED = "queued", "started", "done", "released", "abandoned"
CONTROLS_REFRESH = 2.0  # seconds between reads of pgjobs_queue's concurrency limits
BATCH_WINDOW = 0.002  # seconds without another run ending that end a micro-batch
BATCH_WINDOW_MAX = 0.010  # the longest a finished run waits for others to share its round trip
RUNS_LONG = 0.05  # seconds after which a run in progress stops counting as short (prefetch)
HOLD_MAX = 0.5  # seconds prefetched jobs may wait while every thread is busy before release
_JOB_FMT = "%s#%s queue=%s attempt=%s/%s duration_ms=%s trace_id=%s"
_SUCCESS_FMT = "%s " + _JOB_FMT  # the action, then the job
_SUCCESS = {JobStatus.COMPLETED: "job.completed",  # logged at INFO, with this action
            JobStatus.COMPLETED_WITH_ERRORS: "job.completed_with_errors"}


@dataclass(eq=False, slots=True)
class InFlight:
    job: JobContext
    spec: HandlerSpec
    state: str = QUEUED
    started_at: float = 0.0
    deadline: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class Worker:
    def __init__(self, options: WorkerOptions | None = None):
        self.options = options or WorkerOptions.from_settings()
        o = self.options
        if o.concurrency < 1 or o.batch_size < 1 or o.prefetch < 0:
            raise ValueError("concurrency and batch_size must be >= 1, prefetch >= 0")
        self.worker_id = o.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.using = o.using
        self._inflight: dict[int, InFlight] = {}
        self._inflight_lock = threading.Lock()
        self._finished: queue.SimpleQueue[tuple[InFlight, Completion]] = queue.SimpleQueue()
        self._unwritten: list[tuple[InFlight, Completion]] = []  # kept across database outages
        self._work: Handoff[InFlight] = Handoff()  # claimed jobs -> executor threads
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._signals_seen = 0
        self._zombies = 0  # threads still stuck in a handler that timed out
        self._threads: list[threading.Thread] = []
        self._listener: Listener | None = None
        self.claimed_total = 0
        self.finished_total = 0
        self._last_heartbeat = 0.0
        self._next_reap = 0.0
        self._db_backoff = 0.0
        self._last_claim_full = False
        self._limited: list[str] = []
        self._tenant_cursor: str | None = None
        # A finished run wakes the loop, which then waits up to BATCH_WINDOW for the other
        # running jobs to end too (or this many), so that one round trip records them all and
        # refills every free thread. Waking for each run made cycles of 2-3 jobs: 5,000 -> 6,700
        # jobs/s at concurrency 10, 9,700 -> 15,600 at 64 (no-op jobs, this 2-core machine).
        # With prefetched jobs held, it waits for half of them (see finalize_and_claim).
        self._base_refill = self._refill = max(1, min(o.batch_size, o.concurrency))
        self._last_claim_short = False  # every type in the last non-empty claim runs short
        self._next_controls = 0.0
        self._statistics_checked = False
        self.exit_code = 0
        self.last_step_at = time.monotonic()  # /livez: the loop keeps stepping
        self._rollup = rollup.WorkerRollup()  # the dashboard's counts
        self._health: health.HealthServer | None = None
        self._next_schedule = 0.0  # scheduler: at start, then every scheduler_interval
        # pruner: first in the second half of its interval, so that restarts do not stampede
        spread = 0.5 + 0.5 * random.random()  # noqa: S311
        self._next_prune = time.monotonic() + o.prune_interval * spread

    # --- public -------------------------------------------------------------------------------

    def run(self) -> int:
        """Process jobs until stopped (or, with burst/max_jobs, until done). Returns an exit code."""
        self.start()
        try:
            while not self._stopping.is_set():
                self.run_once()
                if self._done():
                    break
                self._wait()
        finally:
            self.shutdown()
        return self.exit_code

    def run_once(self) -> int:
        """One step of the loop; returns how many jobs were claimed. Survives database outages."""
        self.last_step_at = time.monotonic()
        try:
            if not self._statistics_checked:  # a fresh table gets planner statistics first
                queries.analyze_if_never_analyzed(using=self.using)
                self._statistics_checked = True
            if not self.options.inline:  # the caller's connection is not ours to configure
                queries.use_generic_plans(using=self.using)
            self.maintain()
            claimed = self.finalize_and_claim()
            self._db_backoff = 0.0
            return claimed
        except (OperationalError, InterfaceError) as exc:
            self._on_db_error(exc)
            return 0

    def stop(self) -> None:
        """Begin a graceful shutdown (what the first SIGTERM/SIGINT does)."""
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    # --- start / stop -------------------------------------------------------------------------

    def start(self) -> None:
        o = self.options
        self._types = registry.registered_types()
        connection_created.connect(self._tag_connection, weak=False)
        if o.install_signal_handlers and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        for i in range(0 if o.inline else o.concurrency):
            t = threading.Thread(target=self._executor_thread, name=f"pgjobs-exec-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        if o.listen and not o.burst:
            self._listener = Listener(
                alias=self.using, channel=conf.get("NOTIFY_CHANNEL"), queues=o.queues,
                wake=self.wake, application_name=self._app_name("listen"),
            )
            self._listener.start()
        self._next_reap = time.monotonic()  # reap once at start: rescue what a crash left
        self._start_observability()
        logger.info(
            "worker %s started: queues=%s concurrency=%s batch=%s types=%s", self.worker_id,
            ",".join(o.queues) if o.queues else "*", o.concurrency, o.batch_size,
            ",".join(sorted(self._types)), extra={"action": "worker.started"},
        )
        if not self._types:
            logger.warning(
                "no job handler is registered: this worker will claim nothing. Define handlers "
                "with @django_pgjobs.handler in a jobs.py module of an installed app",
                extra={"action": "worker.no_handlers"},
            )

    def shutdown(self) -> None:
        """Release unstarted jobs, let running ones finish (heartbeating), release the rest."""
        self._stopping.set()
        o = self.options
        self._with_db_retry(self._release_unstarted, attempts=3)
        deadline = time.monotonic() + o.shutdown_timeout
        while self._running_count() and time.monotonic() < deadline:
            try:
                self.finalize_finished()
                self.maintain(reap=False)
            except (OperationalError, InterfaceError) as exc:
                self._on_db_error(exc)
            self._wake.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
        self._with_db_retry(self.finalize_finished, attempts=3)
        self._work.close()
        join_deadline = time.monotonic() + 2.0
        for t in self._threads:
            t.join(max(0.0, join_deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.stop()
        self._stop_observability()
        # Last: an abandoned handler keeps running until this process exits, so its job becomes
        # claimable elsewhere only now (not before the 2 s thread join above).
        if self._running_count():
            self._with_db_retry(self._release_running, attempts=3)
            self._with_db_retry(self.finalize_finished, attempts=3)  # runs that ended meanwhile
        self._with_db_retry(lambda: queries.delete_worker(self.worker_id, using=self.using), 2)
        connection_created.disconnect(self._tag_connection)
        logger.info(
            "worker %s stopped: %s jobs finished", self.worker_id, self.finished_total,
            extra={"action": "worker.stopped"},
        )

    # --- observability (health.py, rollup.py): additive hooks, no per-job database work ----------

    def _start_observability(self) -> None:
        self._rollup.start()
        o = self.options
        if o.health_port is not None:
            self._health = health.HealthServer(self, o.health_host, o.health_port).start()

    def _observe_step(self) -> None:
        try:
            self._rollup.step(self.using, sample=not self.options.burst)
        except (OperationalError, InterfaceError):
            raise  # run_once backs off and retries
        except Exception:
            logger.exception("dashboard rollup step failed; retried at the next step",
                             extra={"action": "worker.rollup_error"})

    def _stop_observability(self) -> None:
        self._with_db_retry(lambda: self._rollup.stop(self.using), attempts=2)
        if self._health is not None:
            self._health.stop()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals_seen += 1
        if self._signals_seen == 1:
            logger.warning(
                "received %s: finishing running jobs (up to %ss); send it again to exit at once",
                signal.Signals(signum).name, self.options.shutdown_timeout,
                extra={"action": "worker.stopping"},
            )
            self.stop()
            return
        logger.error(
            "received %s again: exiting now; running jobs will be rescued when their lease "
            "expires", signal.Signals(signum).name, extra={"action": "worker.killed"},
        )
        os._exit(128 + signum)

    # --- the steps ----------------------------------------------------------------------------

    def finalize_and_claim(self) -> int:
        """Record the runs that ended and claim as many jobs as that frees, in one round trip.

        A claim fills the free threads and, while every job held is of a type that runs short,
        up to ``prefetch`` more, which wait in the handoff for a thread: a drain of short jobs
        then refills the threads' queue before it runs dry, and a round trip carries up to
        ``batch_size`` jobs instead of one per free thread. Queues with a concurrency limit are
        claimed first, in their own short transactions, and only for free threads.
        """
        batch = self._take_finished()
        o = self.options
        free = o.concurrency - self._running_count() + len(batch) - self._zombies
        prefetch = o.prefetch and not o.inline and self._prefetching()
        room = free + (o.prefetch if prefetch else 0)
        if o.max_jobs is not None:
            room = min(room, o.max_jobs - self.claimed_total)
        limit = 0 if self._stopping.is_set() else min(room, o.batch_size)
        rows: list[ClaimedRow] = []
        if limit > 0 and self._limited:
            self.finalize_finished()  # writes this batch (kept in _unwritten until written)
            batch = []
            for name in self._limited:  # capped queues first: they are served one by one
                if len(rows) >= min(free, limit):  # a capped queue's job waits for no thread
                    break
                rows += queries.claim_limited(
                    queue=name, worker_id=self.worker_id, types=self._types,
                    limit=min(free, limit) - len(rows), lease_seconds=o.lease_seconds,
                    using=self.using,
                )
        want = limit - len(rows)
        written, fast = queries.finalize_and_claim(  # no round trip when there is nothing to do
            [c for _, c in batch if not c.written],
            worker_id=self.worker_id, types=self._types, queues=o.queues,
            limit=want, lease_seconds=o.lease_seconds, fair=o.fair_share,
            after_tenant=self._tenant_cursor, using=self.using,
        )
        self._write_finished(batch, written)
        if o.fair_share and want > 0:  # next claim starts after the last tenant served
            tenants = [r.tenant_id for r in fast if r.tenant_id is not None]
            self._tenant_cursor = max(tenants) if len(fast) == want and tenants else None
        rows += fast
        # Claim again at once only if the batch size, not the room, capped this claim: with
        # every thread busy (and the prefetch full), the next cycle waits for runs to end.
        self._last_claim_full = 0 < limit < room and len(rows) == limit
        if rows:
            self._last_claim_short = all(self._work.is_short(t) for t in {r.type for r in rows})
        self._dispatch(rows)
        self.claimed_total += len(rows)
        # Wake for the next cycle once half of what is held has ended (or all of it, or the
        # micro-batch window closed): the other half keeps the threads busy meanwhile.
        self._refill = max(self._base_refill, self._running_count() // 2)
        return len(rows)

    def _prefetching(self) -> bool:
        """May this claim take more jobs than free threads? Only while every job held is of a
        type that usually runs short (Handoff.is_short) and none has been running for long:
        then the jobs held get a thread within moments. ``_release_held`` covers the rest."""
        now = time.monotonic()
        with self._inflight_lock:
            items = list(self._inflight.values())
        if not items:
            return self._last_claim_short
        kinds = set()
        for item in items:
            if item.state == STARTED and now - item.started_at > RUNS_LONG:
                return False
            kinds.add(item.job.type)
        return all(self._work.is_short(k) for k in kinds)

    def _release_held(self) -> None:
        """Give back claimed jobs that wait for a thread while every thread is busy and none
        has taken a job for HOLD_MAX: prefetched jobs held behind runs that turned out long.
        Other workers (or this one, later) claim them again; the attempt is refunded."""
        waited = self._work.stuck_for()
        if waited < HOLD_MAX:
            return
        items = self._work.take_back()
        try:
            n = self._give_back(items, reason="released unstarted: every worker thread was busy")
        except BaseException:  # still ours: queue them again, in their order
            self._work.put_many([(i.job.type, i) for i in items])
            raise
        if n:
            logger.info(
                "released %s claimed jobs that waited %.1fs for a thread: every thread is busy",
                n, waited, extra={"action": "worker.released_held"},
            )

    def finalize_finished(self) -> None:
        batch = self._take_finished()
        if batch:
            self._write_finished(
                batch, queries.finalize([c for _, c in batch if not c.written], using=self.using)
            )

    def _take_finished(self) -> list[tuple[InFlight, Completion]]:
        batch = self._unwritten
        self._unwritten = []
        try:
            while True:
                batch.append(self._finished.get_nowait())
        except queue.Empty:
            pass
        self._unwritten = batch  # until written: a database error keeps them for the next step
        return batch

    def _write_finished(self, batch: list[tuple[InFlight, Completion]], written: set[int]) -> None:
        """Bookkeeping once the outcomes are in the database: free the slots, count, log, signal."""
        self._unwritten = []
        written = written | {c.id for _, c in batch if c.written}
        with self._inflight_lock:
            for _, completion in batch:
                self._inflight.pop(completion.id, None)
        self._rollup.recorder.record_finished(
            (item.job.queue, item.job.type, c) for item, c in batch if c.id in written
        )
        log_successes = logger.isEnabledFor(logging.INFO)
        # runjobs' own console alone gets the success lines: a batch's, a few dozen per write
        direct = console.direct_handler(logger) if log_successes else None
        lines: list[str] = []
        for item, completion in batch:
            applied = completion.id in written
            if direct is not None and applied and completion.status in _SUCCESS:
                lines.append(_SUCCESS_FMT % (_SUCCESS[completion.status],
                                             *_job_args(item.job, completion)))
            elif log_successes or not applied or completion.status not in _SUCCESS:
                if lines:  # keep the lines in order (only the direct path collects them)
                    direct.write_messages(logger.name, logging.INFO, lines)
                    lines = []
                self._log_finished(item, completion, applied)
            signals.job_finished.send(
                sender=item.job.type, job=item.job, completion=completion, applied=applied
            )
        if lines:
            direct.write_messages(logger.name, logging.INFO, lines)
        self.finished_total += len(batch)

    def maintain(self, *, reap: bool = True) -> None:
        now = time.monotonic()
        o = self.options
        if now >= self._next_controls:
            self._refresh_queue_controls()
            self._next_controls = now + CONTROLS_REFRESH
        if now - self._last_heartbeat >= o.lease_seconds / 3:
            self._check_timeouts(now)
            self._heartbeat()
            self._last_heartbeat = now
        if o.prefetch and not o.inline:
            self._release_held()
        if reap and now >= self._next_reap:
            self._reap()
            self._next_reap = now + o.reap_interval * (0.8 + 0.4 * random.random())  # noqa: S311
        self._observe_step()
        if reap and not o.burst:
            self._periodic(now)

    def _periodic(self, now: float) -> None:
        """Cron schedules and pruning: each pass is safe to run from every worker at once."""
        o = self.options
        jitter = 0.8 + 0.4 * random.random()  # noqa: S311
        if o.scheduler and now >= self._next_schedule:
            self._next_schedule = now + o.scheduler_interval * jitter
            self._maintenance_step("scheduler", scheduler.enqueue_due)
        if o.prune and now >= self._next_prune:
            self._next_prune = now + o.prune_interval * jitter
            self._maintenance_step("prune", retention.prune_once)

    def _maintenance_step(self, name: str, step: Any) -> None:
        try:
            step(using=self.using)
        except (OperationalError, InterfaceError):
            raise  # run_once backs off and retries
        except Exception:
            logger.exception("maintenance step %s failed; retried at its next interval", name,
                             extra={"action": "worker.maintenance_error"})

    # --- pieces -------------------------------------------------------------------------------

    def _refresh_queue_controls(self) -> None:
        """Which of our queues have a cluster-wide limit (pauses are read by every claim)."""
        limited = queries.limited_queues(using=self.using)
        wanted = self.options.queues
        self._limited = [q for q in limited if wanted is None or q in wanted]

    def _dispatch(self, rows: list[ClaimedRow]) -> None:
        """Hand claimed jobs to the executor threads (or run them here when inline)."""
        now = time.monotonic()
        items = []
        handlers: dict[str, tuple[HandlerSpec, float | None]] = {}  # per type, once per batch
        for row in rows:
            handler = handlers.get(row.type)
            if handler is None:
                spec = registry.get(row.type)
                assert spec is not None  # the claim only takes registered types  # noqa: S101
                handler = handlers[row.type] = (spec, spec.effective_timeout())
            spec, timeout = handler
            job = JobContext(
                id=row.id, type=row.type, queue=row.queue, priority=row.priority,
                config=row.config, attempts=row.attempts, max_attempts=row.max_attempts,
                trace_id=row.trace_id, tenant_id=row.tenant_id, created_at=row.created_at,
                worker_id=self.worker_id, lease_token=row.lease_token,
                cancel_requested=row.cancel_requested,
            )
            items.append(InFlight(job, spec, QUEUED, 0.0, (now + timeout) if timeout else None))
        with self._inflight_lock:
            for item in items:
                self._inflight[item.job.id] = item
        handoff = []
        for row, item in zip(rows, items, strict=True):
            if row.config_error is not None:  # written by raw SQL: fail the job, run nothing
                item.state = DONE
                self._finished.put((item, Completion(
                    id=row.id, token=row.lease_token, attempt=row.attempts,
                    status=JobStatus.FAILED, error=row.config_error, note="failed")))
            elif self.options.inline:
                self.run_item(item)
            else:
                handoff.append((row.type, item))
        self._work.put_many(handoff)

    def _executor_thread(self) -> None:
        while True:
            item = self._work.get()
            if item is None:  # closed by the shutdown
                connections.close_all()  # this thread's own connections
                return
            self.run_item(item)

    def run_item(self, item: InFlight) -> None:
        """Run one claimed job on the calling thread: an executor thread, or the caller of
        run_once() with ``inline`` (testing.run_jobs)."""
        with item.lock:
            if item.state != QUEUED:  # released by a shutdown before it started
                return
            item.state = STARTED
            item.started_at = time.monotonic()
            if item.deadline is not None:
                item.deadline = item.started_at + (item.spec.effective_timeout() or 0)
        job = item.job
        if logger.isEnabledFor(logging.DEBUG):  # at INFO the one line per job is its outcome
            logger.debug(
                "job.started %s#%s queue=%s attempt=%s/%s trace_id=%s", job.type, job.id,
                job.queue, job.attempts, job.max_attempts, job.trace_id,
                extra={"action": "job.started", "job_id": job.id, "job_type": job.type,
                       "trace_id": job.trace_id},
            )
        signals.job_started.send(sender=job.type, job=job)
        completion = executor.execute(item.spec, job, using=self.using, inline=self.options.inline)
        self._work.ran(job.type, time.monotonic() - item.started_at)
        with item.lock:
            if item.state == ABANDONED:  # timed out: its slot is given back now
                with self._inflight_lock:
                    self._zombies -= 1
                self._wake.set()
                return
            item.state = DONE
        self._finished.put((item, completion))
        ended = self._finished.qsize()
        if ended == 1 or ended >= self._refill or ended >= len(self._inflight):  # a hint: no lock
            self._wake.set()

    def _check_timeouts(self, now: float) -> None:
        with self._inflight_lock:
            items = list(self._inflight.values())
        for item in items:
            if item.deadline is None or now < item.deadline:
                continue
            with item.lock:
                if item.state != STARTED:
                    continue
                item.state = ABANDONED
            with self._inflight_lock:
                self._zombies += 1
            job = item.job
            exc = JobTimeout(f"handler ran longer than its timeout of {item.spec.effective_timeout()}s")
            completion = executor._on_error(  # noqa: SLF001 - same decision as a raised error
                item.spec, job, exc, int((now - item.started_at) * 1000)
            )
            self._finished.put((item, completion))
        if self._zombies >= self.options.concurrency:
            logger.error(
                "every executor thread is stuck in a handler that timed out: stopping so that a "
                "supervisor restarts this worker", extra={"action": "worker.stuck"},
            )
            self.exit_code = 3
            self.stop()

    def _heartbeat(self) -> None:
        o = self.options
        with self._inflight_lock:
            items = [i for i in self._inflight.values() if i.state in (QUEUED, STARTED)]
        if items:
            held = queries.heartbeat(
                [(i.job.id, i.job._lease) for i in items], o.lease_seconds, using=self.using
            )
            for item in items:
                if item.job.id in held:
                    item.job._cancel_requested = held[item.job.id]
                elif not item.job._lease_lost and item.state in (QUEUED, STARTED):
                    item.job._lease_lost = True
                    logger.warning(
                        "job.lease_lost %s#%s: another worker or the reaper took it over; its "
                        "outcome will be discarded", item.job.type, item.job.id,
                        extra={"action": "job.lease_lost", "job_id": item.job.id},
                    )
        queries.upsert_worker(
            worker_id=self.worker_id, hostname=socket.gethostname(), pid=os.getpid(),
            queues=o.queues or ["*"], concurrency=o.concurrency, jobs_done=self.finished_total,
            using=self.using,
        )

    def _reap(self) -> None:
        for job_id, job_type, status, attempts, max_attempts in queries.reap(using=self.using):
            logger.warning(
                "job.reaped %s#%s: lease expired during attempt %s/%s -> %s", job_type, job_id,
                attempts, max_attempts, status,
                extra={"action": "job.reaped", "job_id": job_id, "job_type": job_type},
            )
            signals.job_reaped.send(sender=job_type, job_id=job_id, status=status)

    def _release_unstarted(self) -> None:
        with self._inflight_lock:
            items = list(self._inflight.values())
        if n := self._give_back(items, reason="released unstarted at worker shutdown"):
            logger.info("released %s unstarted jobs", n, extra={"action": "worker.released"})

    def _give_back(self, items: list[InFlight], *, reason: str) -> int:
        """Release those of ``items`` that no thread has started (attempt refunded); returns
        how many. On a database error they are still ours: QUEUED again, and it raises."""
        released = []
        for item in items:
            with item.lock:
                if item.state == QUEUED:
                    item.state = RELEASED
                    released.append(item)
        if not released:
            return 0
        try:
            queries.release([(i.job.id, i.job._lease) for i in released], reason=reason,
                            using=self.using)
        except BaseException:
            for item in released:
                with item.lock:
                    item.state = QUEUED
            raise
        with self._inflight_lock:
            for i in released:
                self._inflight.pop(i.job.id, None)
        return len(released)

    def _release_running(self) -> None:
        with self._inflight_lock:
            items = list(self._inflight.values())
        stuck = []
        for item in items:
            with item.lock:
                if item.state == STARTED:
                    item.state = ABANDONED
                    stuck.append(item)
        if stuck:
            queries.release(
                [(i.job.id, i.job._lease) for i in stuck],
                reason=f"interrupted: still running after the {self.options.shutdown_timeout}s "
                "shutdown timeout",
                using=self.using,
            )
            logger.warning(
                "released %s jobs still running after the shutdown timeout: %s", len(stuck),
                ", ".join(f"{i.job.type}#{i.job.id}" for i in stuck),
                extra={"action": "worker.released_running"},
            )

    def _log_finished(self, item: InFlight, c: Completion, applied: bool) -> None:
        job = item.job
        extra = {"job_id": job.id, "job_type": job.type, "trace_id": job.trace_id}
        if not applied:
            logger.warning(
                "job.lease_lost %s#%s: outcome %s discarded, the job was taken over", job.type,
                job.id, c.status, extra={**extra, "action": "job.lease_lost"},
            )
            return
        args = _job_args(job, c)
        if c.status in _SUCCESS:
            action = _SUCCESS[c.status]
            extra["action"] = action
            if not _STOCK_LOGGER:  # a Logger class of the project's: its info() may add to it
                logger.info(_SUCCESS_FMT, action, *args, extra=extra)
            elif logger.isEnabledFor(logging.INFO):  # logger.info() without its search of the
                # stack for the caller (known: here), about a sixth of this line's cost
                logger.handle(logger.makeRecord(
                    logger.name, logging.INFO, __file__, _SUCCESS_LINENO, _SUCCESS_FMT,
                    (action, *args), None, "_log_finished", extra,
                ))
        elif c.status == JobStatus.PENDING:
            when = f"at {c.run_at.isoformat()}" if c.run_at else f"in {c.delay or 0:.1f}s"
            logger.warning(
                "job.retry_scheduled " + _JOB_FMT + " retry %s: %s",  # noqa: G003 - constants
                *args, when, _summary(c.error), extra={**extra, "action": "job.retry_scheduled"},
            )
        else:
            logger.error(
                "job.failed " + _JOB_FMT + ": %s",  # noqa: G003 - constants
                *args, _summary(c.error), extra={**extra, "action": "job.failed"},
            )

    # --- waiting, errors, bookkeeping -----------------------------------------------------------

    def _running_count(self) -> int:
        with self._inflight_lock:
            return len(self._inflight)

    def _done(self) -> bool:
        o = self.options
        idle = self._running_count() == 0 and self._finished.empty() and not self._unwritten
        if o.max_jobs is not None and self.claimed_total >= o.max_jobs and idle:
            return True
        if o.burst and idle and not self._last_claim_full and not self._db_backoff:
            # Nothing in flight and the last claim came back short: is anything still due?
            # (Not knowable while the database fails: then back off and ask again.)
            return self.run_once() == 0 and self._running_count() == 0 and not self._db_backoff
        return False

    def _wait(self) -> None:
        o = self.options
        if self._db_backoff:
            # The database is failing: wait the whole backoff. Only a stop cuts it short, not a
            # finished run, a full last claim or the (also disconnected) listener's poll interval.
            self._sleep(self._db_backoff, self._stopping)
            self._wake.clear()
            return
        if self._last_claim_full and not self._stopping.is_set():
            return  # more work is probably waiting: claim again at once
        if not self._finished.qsize():
            # Idle until a run ends, a NOTIFY arrives, a stop, or the poll interval (what finds
            # new jobs while the listener is disconnected).
            self._sleep(o.poll_interval)
            self._wake.clear()
        # Micro-batch: while other running jobs keep ending, give them a moment to end too, so
        # that one round trip records them all and refills every free thread. The executors
        # wake us as soon as enough did; a window in which none ended (long jobs) ends the wait.
        # Without it, the run that ends first (it wakes us) made cycles of one or two jobs.
        ended = self._finished.qsize()
        deadline = time.monotonic() + BATCH_WINDOW_MAX
        while 0 < ended < self._refill and ended < self._running_count():
            self._sleep(BATCH_WINDOW)
            self._wake.clear()
            before, ended = ended, self._finished.qsize()
            if ended == before or time.monotonic() >= deadline:
                break

    def _sleep(self, timeout: float, event: threading.Event | None = None) -> None:
        """Wait for ``event`` (the wake-up) or the timeout; meanwhile wake executor threads for
        jobs left waiting behind a long one (Handoff.spread)."""
        event = event or self._wake
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            step = min(left, self._work.spread())
            if event.wait(max(0.0, step)) or step >= left:
                return

    def _on_db_error(self, exc: BaseException) -> None:
        self._db_backoff = min(max(self._db_backoff * 2, 0.25), 30.0)
        logger.error(
            "database error in the worker loop (%s: %s); retrying in %.2fs",
            exc.__class__.__name__, " ".join(str(exc).split())[:500], self._db_backoff,
            extra={"action": "worker.db_error"},
        )
        try:
            connections[self.using].close()
        except Exception:  # noqa: BLE001,S110
            pass

    def _with_db_retry(self, fn: Any, attempts: int) -> None:
        for i in range(attempts):
            try:
                fn()
                return
            except (OperationalError, InterfaceError, DatabaseError) as exc:
                self._on_db_error(exc)
                if i + 1 < attempts:
                    time.sleep(min(self._db_backoff, 2.0))

    def _app_name(self, role: str) -> str:
        return f"pgjobs:{self.worker_id}:{role}"[:63]

    def _tag_connection(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        role = "main" if threading.current_thread() is threading.main_thread() else "exec"
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT set_config('application_name', %s, false)", [self._app_name(role)])
        except DatabaseError:  # pragma: no cover - tagging is best effort
            pass


# The line the per-job success records name as theirs (_log_finished builds them itself),
# unless a Logger class set by the project (logging.setLoggerClass) has its own info() or _log().
_SUCCESS_LINENO = Worker._log_finished.__code__.co_firstlineno
_STOCK_LOGGER = (type(logger).info is logging.Logger.info
                 and type(logger)._log is logging.Logger._log)


def _job_args(job: JobContext, c: Completion) -> tuple[Any, ...]:
    """_JOB_FMT's arguments."""
    return (job.type, job.id, job.queue, job.attempts, job.max_attempts, c.duration_ms,
            job.trace_id)


def _summary(text: str | None) -> str:
    if not text:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
