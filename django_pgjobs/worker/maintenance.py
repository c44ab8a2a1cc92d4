"""The worker's maintenance services, one class per concern (services.py runs them).

reaper          RUNNING jobs whose lease expired -> PENDING (the type's backoff) or FAILED
queue_controls  which of our queues have a cluster-wide cap (the producer claims them apart)
rollup_flush    the dashboard's per-minute counts, one upsert
scheduler       cron ticks due -> jobs (each tick once, by unique constraint)
pruner          finished jobs past their retention, in small batches
depth_sample    queue depth once a minute for the cluster (one worker per minute)
rollup_prune    rollup rows past ROLLUP_RETENTION_DAYS (one worker at a time)
unknown_types   due jobs of types this worker does not know: logged once per type
aging           long-waiting due jobs of PGJOBS["AGING"]'s queues lifted a priority step
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import datetime

from .. import aging, conf, flow, queries, registry, retention, retry, rollup, scheduler, signals
from ..sql import queues, rollups
from .completer import send_robust
from .options import WorkerOptions
from .services import Service

logger = logging.getLogger("django_pgjobs.worker")

CONTROLS_REFRESH = 2.0  # seconds between reads of pgjobs_queue's concurrency limits
ROLLUP_PRUNE_LOCK_KEY = 0x70676A6F627302  # "pgjobs" + 2 in ASCII, as an int


FOREIGN_GRACE = 2.0  # reap intervals a job of a type this worker does not know is left alone


class Reaper(Service):
    """Rescues jobs whose worker stopped renewing their lease (crashed, killed, stalled); each
    gets the same retry decision as a run that raised (retry.decide, the type's policy).

    A job of a type this worker does not register is left FOREIGN_GRACE reap intervals past
    its expiry to a worker that knows its policy; after that it gets the global policy."""

    name = "reaper"

    def __init__(self, using: str, interval: float | None = None, limit: int = 500) -> None:
        super().__init__(using)
        self.interval = interval if interval is not None else conf.get("REAP_INTERVAL")
        self.limit = limit

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        counts = {"rescued": 0, "failed": 0}
        rescued = queries.reap(
            reaped_fate,
            limit=self.limit,
            now=now,
            known_types=registry.registered_types(),
            grace=FOREIGN_GRACE * self.interval,
            using=self.using,
        )
        for job_id, job_type, status, attempts, max_attempts in rescued:
            counts["failed" if status == "FAILED" else "rescued"] += 1
            logger.warning(
                "job.reaped %s#%s: lease expired during attempt %s/%s -> %s",
                job_type,
                job_id,
                attempts,
                max_attempts,
                status,
                extra={"action": "job.reaped", "job_id": job_id, "job_type": job_type},
            )
            send_robust(signals.job_reaped, sender=job_type, job_id=job_id, status=status)
        # Edges a crash left open (between a fan-in that cancelled a step and the resolution
        # of that step's own edges): resolved here, counted; expected zero.
        repaired = queries.repair_open_edges(using=self.using)
        if repaired:
            counts["repaired"] = repaired
            logger.warning(
                "workflow.repaired: resolved the open edges of %s ended jobs",
                repaired,
                extra={"action": "workflow.repaired"},
            )
        return counts


def reaped_fate(job_type: str, attempts: int, max_attempts: int) -> retry.Decision:
    """A type registered nowhere in this process (reaped after the grace) gets the global
    policy."""
    return retry.decide(registry.get(job_type), attempts, max_attempts, exc=None)


class QueueControls(Service):
    """Tells the producer which of its queues are controlled (a cap, per-key limit or rate on
    the queue's row or in PGJOBS["QUEUES"]); pauses and the row's values are read by every
    claim itself."""

    name = "queue_controls"
    interval = CONTROLS_REFRESH

    def __init__(
        self, using: str, queues: list[str] | None, publish: Callable[[list[str]], None]
    ) -> None:
        super().__init__(using)
        self.queues = queues
        self.publish = publish

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        names = set(queues.limited_queues(using=self.using)) | set(flow.controlled_queues())
        limited = sorted(q for q in names if self.queues is None or q in self.queues)
        self.publish(limited)
        return {"limited": len(limited)}


class RollupFlush(Service):
    name = "rollup_flush"
    interval = rollup.FLUSH_SECONDS

    def __init__(self, using: str, recorder: rollup.Recorder) -> None:
        super().__init__(using)
        self.recorder = recorder

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        return {"rows": self.recorder.flush(self.using) if self.recorder.pending() else 0}


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, using: str, interval: float) -> None:
        super().__init__(using)
        self.interval = interval

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        return dict(scheduler.enqueue_due(now=now, using=self.using))


class Pruner(Service):
    name = "pruner"

    def __init__(self, using: str, interval: float) -> None:
        super().__init__(using)
        self.interval = interval

    def first_wait(self) -> float:
        """In the second half of the interval, so that restarts do not stampede."""
        return self.interval * (0.5 + 0.5 * random.random())  # noqa: S311

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        return dict(retention.prune_once(now=now, using=self.using, rest=self.rest))

    def rest(self, batch_seconds: float) -> bool:
        """As long as the batch took (at most half a backend for a backlog); False on stop."""
        return not self.stopping.wait(batch_seconds)


class DepthSample(Service):
    name = "depth_sample"
    interval = rollup.SAMPLE_SECONDS
    jitter = 0.0  # one sample a minute: sample_depth() lets one worker per minute write

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        return {"rows": rollups.sample_depth(self.using)}


class RollupPrune(Service):
    name = "rollup_prune"
    interval = rollup.PRUNE_SECONDS
    lock_key = ROLLUP_PRUNE_LOCK_KEY

    def first_wait(self) -> float:
        return 60.0

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        return {"rows": rollups.prune(rollup.retention_days(), self.using)}


class UnknownTypes(Service):
    """Names the due jobs of types no handler here knows (never claimed: they wait for a worker
    that registers them): one warning per type for the life of the worker. Its query walks the
    due jobs, hence the long interval, and not before the first claim."""

    name = "unknown_types"
    interval = 300.0

    def __init__(self, using: str) -> None:
        super().__init__(using)
        self.logged: set[str] = set()

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        from ..health_checks import unknown_due_types

        found = unknown_due_types(registry.registered_types(), using=self.using)
        for job_type, due in found:
            if job_type in self.logged:
                continue
            self.logged.add(job_type)
            logger.warning(
                "job.unknown_type %s: %s due jobs of a type no handler of this worker knows; "
                "they wait for a worker that registers it (deploy its handler, or cancel "
                "them). %s",
                job_type,
                due,
                registry.REGISTER_HINT,
                extra={"action": "job.unknown_type", "job_type": job_type},
            )
        return {"types": len(found)}


class Aging(Service):
    """Lifts due jobs that wait (aging.py); the rules are read at each pass."""

    name = "aging"

    def __init__(self, using: str, queues: list[str] | None) -> None:
        super().__init__(using)
        self.queues = queues
        found = aging.rules(queues)
        self.interval = aging.pass_interval(found) if found else aging.PASS_MAX

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        found = aging.rules(self.queues)
        lifted = queries.age([(r.queue, r.every, r.max) for r in found], now=now, using=self.using)
        return {"lifted": lifted}


def services_for(
    options: WorkerOptions, recorder: rollup.Recorder, publish_limited: Callable[[list[str]], None]
) -> list[Service]:
    """The services a worker with these options runs. A burst worker (and run_jobs()) only
    rescues, reads queue controls and flushes counts; cron, pruning and the rest are for
    long-lived ones."""
    o, using = options, options.using
    services: list[Service] = [
        QueueControls(using, o.queues, publish_limited),
        Reaper(using, o.reap_interval),
        RollupFlush(using, recorder),
    ]
    if o.burst:
        return services
    if o.scheduler:
        services.append(Scheduler(using, o.scheduler_interval))
    if o.prune:
        services.append(Pruner(using, o.prune_interval))
    if aging.rules(o.queues):
        services.append(Aging(using, o.queues))
    return [*services, DepthSample(using), RollupPrune(using), UnknownTypes(using)]
