"""pgjobs_queue rows: pause / resume / concurrency limit of a queue (the claim enforces them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import db, flow
from ..status import PENDING_SQL, RUNNING_SQL
from ..tables import JOB_TABLE, QUEUE_TABLE, RATE_TABLE

_QUEUE_UPSERT = f"""
INSERT INTO {QUEUE_TABLE} AS q (name, paused, concurrency_limit, updated_at)
VALUES (%(name)s, COALESCE(%(paused)s, false), %(limit)s, now())
ON CONFLICT (name) DO UPDATE
SET paused = COALESCE(%(paused)s, q.paused),
    concurrency_limit = CASE WHEN %(set_limit)s THEN %(limit)s ELSE q.concurrency_limit END,
    updated_at = now()
RETURNING q.name, q.paused, q.concurrency_limit
"""


_FLOW_UPSERT = f"""
INSERT INTO {QUEUE_TABLE} AS q (name, per_key_limit, rate, burst, rate_per_key, updated_at)
VALUES (%(name)s, %(per_key)s, %(rate)s, %(burst)s, %(by_key)s, now())
ON CONFLICT (name) DO UPDATE
SET per_key_limit = CASE WHEN %(set_per_key)s THEN %(per_key)s ELSE q.per_key_limit END,
    rate = CASE WHEN %(set_rate)s THEN %(rate)s ELSE q.rate END,
    burst = CASE WHEN %(set_rate)s THEN %(burst)s ELSE q.burst END,
    rate_per_key = CASE WHEN %(set_rate)s THEN %(by_key)s ELSE q.rate_per_key END,
    updated_at = now()
RETURNING q.name
"""


def set_queue_per_key(name: str, per_key: int | None, using: str | None = None) -> None:
    """At most ``per_key`` RUNNING jobs per flow key (None: the row sets none)."""
    _flow_upsert(using, name=name, per_key=per_key, set_per_key=True, set_rate=False)


def set_queue_rate(
    name: str,
    rate: float | None,
    burst: int | None = None,
    per_key: bool | None = None,
    using: str | None = None,
) -> None:
    """Starts per second (None: the row sets none), with its burst and per-key flag."""
    _flow_upsert(
        using, name=name, rate=rate, burst=burst, by_key=per_key, set_per_key=False, set_rate=True
    )


def _flow_upsert(using: str | None, **values: Any) -> None:
    params = {"per_key": None, "rate": None, "burst": None, "by_key": None, **values}
    with db.cursor(using) as cur:
        cur.execute(_FLOW_UPSERT, params)


@dataclass(slots=True)
class QueueInfo:
    name: str
    paused: bool
    concurrency_limit: int | None
    due: int = 0  # PENDING and due now
    scheduled: int = 0  # PENDING for later
    running: int = 0
    per_key_limit: int | None = None
    rate: float | None = None
    burst: int | None = None
    rate_per_key: bool | None = None


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
       COALESCE(c.due, 0), COALESCE(c.scheduled, 0), COALESCE(c.running, 0),
       q.per_key_limit, q.rate, q.burst, q.rate_per_key
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


# --- flow control: what holds a controlled queue's due jobs back ------------------------------

# Over the queue's due and running jobs, grouped by flow key (the claim's partial indexes):
# running, due, due jobs of keys at their per-key limit, due jobs of keys (or the queue) whose
# bucket is empty now, and when the earliest empty bucket allows a start.
_FLOW_STATUS = f"""
WITH c AS ({{controls}}
), due AS (
    SELECT flow_key, count(*) AS n FROM {JOB_TABLE}
    WHERE status = {PENDING_SQL} AND queue = %(queue)s AND run_after <= now() GROUP BY flow_key
), run AS (
    SELECT flow_key, count(*) AS n FROM {JOB_TABLE}
    WHERE status = {RUNNING_SQL} AND queue = %(queue)s GROUP BY flow_key
), lines AS (
    SELECT d.n, COALESCE(r.n, 0) AS running, c.per_key, c.cap, c.paused,
           CASE WHEN c.rate IS NOT NULL THEN {{tokens}} END AS tokens
    FROM due d CROSS JOIN c
    LEFT JOIN run r ON r.flow_key IS NOT DISTINCT FROM d.flow_key
    LEFT JOIN {RATE_TABLE} b ON b.queue = %(queue)s
         AND b.key = CASE WHEN c.by_key THEN COALESCE(d.flow_key, '') ELSE '' END
)
SELECT (SELECT COALESCE(sum(n), 0) FROM run),
       (SELECT COALESCE(sum(n), 0) FROM due),
       COALESCE(sum(n) FILTER (WHERE per_key IS NOT NULL AND running >= per_key), 0),
       COALESCE(sum(n) FILTER (WHERE tokens = 0 AND NOT (per_key IS NOT NULL
                                                         AND running >= per_key)), 0),
       (SELECT cap FROM c), (SELECT paused FROM c)
FROM lines
"""


@dataclass(slots=True)
class FlowHeld:
    held: int  # due jobs no worker may start now
    why: str  # "paused", "limit", "key", "rate", "key, rate" or ""


def flow_held(name: str, using: str | None = None) -> FlowHeld:
    """What holds a controlled queue's due jobs back now, counted from the job rows."""
    from .. import queries

    controls = flow.queues().get(name, flow.FlowSettings())
    statement = _FLOW_STATUS.format(controls=queries.CONTROLS, tokens=queries.tokens_sql("b.tat"))
    params = {
        "queue": name,
        "cap": controls.concurrency,
        "per_key": controls.per_key,
        "rate": controls.rate,
        "burst": controls.burst,
        "by_key": controls.rate_per_key,
    }
    with db.cursor(using) as cur:
        cur.execute(statement, params)
        running, due, by_key, by_rate, cap, paused = cur.fetchone()
    if paused and due:
        return FlowHeld(due, "paused")
    if cap is not None and due > cap - running:
        return FlowHeld(due - max(0, cap - running), "limit")
    why = ", ".join(w for w, n in (("key", by_key), ("rate", by_rate)) if n)
    return FlowHeld(int(by_key + by_rate), why)
