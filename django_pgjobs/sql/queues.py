"""pgjobs_queue rows: pause / resume / concurrency limit of a queue (the claim enforces them)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import db
from ..status import PENDING_SQL, RUNNING_SQL
from ..tables import JOB_TABLE, QUEUE_TABLE

_QUEUE_UPSERT = f"""
INSERT INTO {QUEUE_TABLE} AS q (name, paused, concurrency_limit, updated_at)
VALUES (%(name)s, COALESCE(%(paused)s, false), %(limit)s, now())
ON CONFLICT (name) DO UPDATE
SET paused = COALESCE(%(paused)s, q.paused),
    concurrency_limit = CASE WHEN %(set_limit)s THEN %(limit)s ELSE q.concurrency_limit END,
    updated_at = now()
RETURNING q.name, q.paused, q.concurrency_limit
"""


@dataclass(slots=True)
class QueueInfo:
    name: str
    paused: bool
    concurrency_limit: int | None
    due: int = 0  # PENDING and due now
    scheduled: int = 0  # PENDING for later
    running: int = 0


def set_queue_paused(name: str, paused: bool, using: str | None = None) -> QueueInfo:
    """Pause (the claim stops taking the queue's jobs; running ones finish) or resume a queue."""
    with db.cursor(using) as cur:
        cur.execute(
            _QUEUE_UPSERT, {"name": name, "paused": paused, "limit": None, "set_limit": False}
        )
        return QueueInfo(*cur.fetchone())


def set_queue_limit(name: str, limit: int | None, using: str | None = None) -> QueueInfo:
    """At most ``limit`` jobs of the queue RUNNING at once across all workers (None: no limit)."""
    with db.cursor(using) as cur:
        cur.execute(
            _QUEUE_UPSERT, {"name": name, "paused": None, "limit": limit, "set_limit": True}
        )
        return QueueInfo(*cur.fetchone())


# Every queue that has a control row or active jobs (one branch per partial index: no scan of
# finished jobs), with its controls and job counts.
QUEUE_OVERVIEW = f"""
WITH c(queue, due, scheduled, running) AS (
    SELECT queue,
           count(*) FILTER (WHERE status = {PENDING_SQL} AND run_after <= now()),
           count(*) FILTER (WHERE status = {PENDING_SQL} AND run_after > now()),
           count(*) FILTER (WHERE status = {RUNNING_SQL})
    FROM (SELECT queue, status, run_after FROM {JOB_TABLE} WHERE status = {PENDING_SQL}
          UNION ALL
          SELECT queue, status, run_after FROM {JOB_TABLE} WHERE status = {RUNNING_SQL}) active
    GROUP BY queue
)
SELECT COALESCE(q.name, c.queue), COALESCE(q.paused, false), q.concurrency_limit,
       COALESCE(c.due, 0), COALESCE(c.scheduled, 0), COALESCE(c.running, 0)
FROM {QUEUE_TABLE} q FULL JOIN c ON c.queue = q.name
ORDER BY 1
"""


def queue_overview(using: str | None = None) -> list[QueueInfo]:
    """Every queue that has a control row or active jobs, with its controls and job counts."""
    with db.cursor(using) as cur:
        cur.execute(QUEUE_OVERVIEW)
        return [QueueInfo(*r) for r in cur.fetchall()]


def limited_queues(using: str | None = None) -> list[str]:
    """Names of open queues whose row sets a control (cap, per-key limit, rate): they are
    claimed one by one (queries.claim_controlled)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"SELECT name FROM {QUEUE_TABLE} WHERE NOT paused AND (concurrency_limit IS NOT NULL "
            "OR per_key_limit IS NOT NULL OR rate IS NOT NULL) ORDER BY name"
        )
        return [r[0] for r in cur.fetchall()]


def has_pending(name: str, using: str | None = None) -> bool:
    """Whether a PENDING job waits in the queue (walks the pending jobs: not for hot paths)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"SELECT EXISTS (SELECT 1 FROM {JOB_TABLE} WHERE status = {PENDING_SQL} "
            "AND queue = %s)",
            [name],
        )
        return bool(cur.fetchone()[0])


def queue_names(using: str | None = None) -> list[str]:
    """Every queue that has a control row (the admin's queue filter)."""
    with db.cursor(using) as cur:
        cur.execute(f"SELECT name FROM {QUEUE_TABLE}")
        return [r[0] for r in cur.fetchall()]
