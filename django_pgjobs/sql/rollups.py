"""pgjobs_stat_minute and pgjobs_depth_sample: the rollups' upsert, depth sample, prune, reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from django.db import transaction

from .. import conf, db
from ..status import PENDING_SQL, RUNNING_SQL
from ..tables import DEPTH_SAMPLE_TABLE, JOB_TABLE, STAT_MINUTE_TABLE

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

# pg_try_advisory_xact_lock key of the depth sampler ("pgjobs" + 1 in ASCII, as an int).
SAMPLE_LOCK_KEY = 0x70676A6F627301

_UPSERT = f"""
INSERT INTO {STAT_MINUTE_TABLE} AS t
    (minute, queue, type, completed, failed, retried, duration_sum_ms, duration_hist)
SELECT v.minute, v.queue, v.type, v.completed, v.failed, v.retried, v.duration_sum_ms,
       v.duration_hist
FROM jsonb_to_recordset(%s::jsonb) AS v(minute timestamptz, queue text, type text,
     completed bigint, failed bigint, retried bigint, duration_sum_ms bigint, duration_hist jsonb)
ON CONFLICT (minute, queue, type) DO UPDATE
SET completed = t.completed + EXCLUDED.completed,
    failed = t.failed + EXCLUDED.failed,
    retried = t.retried + EXCLUDED.retried,
    duration_sum_ms = t.duration_sum_ms + EXCLUDED.duration_sum_ms,
    duration_hist = (
        SELECT COALESCE(jsonb_agg(COALESCE(a.n::bigint, 0) + COALESCE(b.n::bigint, 0)
                                  ORDER BY COALESCE(a.i, b.i)), '[]'::jsonb)
        FROM jsonb_array_elements_text(t.duration_hist) WITH ORDINALITY AS a(n, i)
        FULL JOIN jsonb_array_elements_text(EXCLUDED.duration_hist) WITH ORDINALITY AS b(n, i)
          ON a.i = b.i)
"""


def upsert_minutes(rows: Sequence[dict[str, Any]], using: str | None = None) -> None:
    """Add per-minute counters (dicts of _UPSERT's columns) to their rows, in one statement."""
    with db.cursor(using) as cur:
        cur.execute(_UPSERT, [json.dumps(rows, separators=(",", ":"))])


def queues_of(job_ids: Sequence[int], using: str | None = None) -> dict[int, str]:
    """The queue of each job that still exists (reaped jobs join the counts by queue)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"SELECT id, queue FROM {JOB_TABLE} WHERE id = ANY(%s::bigint[])", [list(job_ids)]
        )
        return dict(cur.fetchall())


# Live depth per queue, read from the active jobs: one branch per partial index (PENDING: the
# claim's, RUNNING: the lease's). `status IN (...)` matches neither predicate and scanned the
# whole table (1.1 s over 10M finished jobs; docs/performance.md).
DEPTH_BY_QUEUE = f"""
SELECT queue,
       count(*) FILTER (WHERE status = {PENDING_SQL} AND run_after <= now()) AS due,
       count(*) FILTER (WHERE status = {PENDING_SQL} AND run_after > now()) AS scheduled,
       count(*) FILTER (WHERE status = {RUNNING_SQL}) AS running,
       count(*) FILTER (WHERE status = {RUNNING_SQL} AND lease_expires_at < now()) AS stale,
       EXTRACT(EPOCH FROM now() - min(run_after) FILTER (
           WHERE status = {PENDING_SQL} AND run_after <= now()))::float8 AS oldest_due_age_s
FROM (SELECT queue, status, run_after, lease_expires_at FROM {JOB_TABLE}
      WHERE status = {PENDING_SQL}
      UNION ALL
      SELECT queue, status, run_after, lease_expires_at FROM {JOB_TABLE}
      WHERE status = {RUNNING_SQL}) active
GROUP BY queue
"""

_SAMPLE = f"""
INSERT INTO {DEPTH_SAMPLE_TABLE} (sampled_at, queue, due, scheduled, running, oldest_due_age_s)
SELECT date_trunc('minute', now()), queue, due, scheduled, running, oldest_due_age_s
FROM ({DEPTH_BY_QUEUE}) depth
WHERE NOT EXISTS (SELECT 1 FROM {DEPTH_SAMPLE_TABLE}
                  WHERE sampled_at = date_trunc('minute', now()))
ON CONFLICT (sampled_at, queue) DO NOTHING
"""


def depth_by_queue(using: str | None = None) -> list[tuple[Any, ...]]:
    """DEPTH_BY_QUEUE's rows: (queue, due, scheduled, running, stale, oldest_due_age_s)."""
    with db.cursor(using) as cur:
        cur.execute(DEPTH_BY_QUEUE)
        return cur.fetchall()


def sample_depth(using: str | None = None) -> int:
    """Record this minute's queue depth unless another worker did; returns rows written."""
    alias = using or conf.get("DATABASE")
    with transaction.atomic(using=alias), db.cursor(alias) as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [SAMPLE_LOCK_KEY])
        if not cur.fetchone()[0]:
            return 0
        cur.execute(_SAMPLE)
        return cur.rowcount


def prune(days: float, using: str | None = None) -> int:
    """Delete rollup rows older than ``days``; returns the number of rows deleted."""
    deleted = 0
    with db.cursor(using) as cur:
        for table, column in ((STAT_MINUTE_TABLE, "minute"), (DEPTH_SAMPLE_TABLE, "sampled_at")):
            cur.execute(
                f"DELETE FROM {table} WHERE {column} < now() - %s * interval '1 day'", [days]
            )
            deleted += cur.rowcount
    return deleted


# --- reading ----------------------------------------------------------------------------------


def minute_series(
    since: datetime,
    until: datetime,
    using: str | None = None,
) -> list[tuple[datetime, int, int, int]]:
    """(minute, completed, failed, retried) for every minute of [since, until), zeros included."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT m, COALESCE(sum(s.completed), 0), COALESCE(sum(s.failed), 0),
                       COALESCE(sum(s.retried), 0)
                FROM generate_series(date_trunc('minute', %s::timestamptz),
                                     %s::timestamptz - interval '1 minute',
                                     interval '1 minute') AS m
                LEFT JOIN {STAT_MINUTE_TABLE} s ON s.minute = m
                GROUP BY m ORDER BY m""",
            [since, until],
        )
        return [(r[0], int(r[1]), int(r[2]), int(r[3])) for r in cur.fetchall()]


def minute_rows(
    since: datetime,
    group_by: str,
    using: str | None = None,
) -> list[tuple[Any, ...]]:
    """(queue or type, completed, failed, retried, duration_sum_ms, duration_hist) of every
    rollup row since ``since``."""
    if group_by not in ("queue", "type"):
        raise ValueError("group_by must be 'queue' or 'type'")
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT {group_by}, completed, failed, retried, duration_sum_ms, duration_hist
                FROM {STAT_MINUTE_TABLE} WHERE minute >= %s""",
            [since],
        )
        return cur.fetchall()


def depth_series(
    since: datetime,
    using: str | None = None,
) -> dict[str, list[tuple[datetime, int]]]:
    """Due jobs per queue at each sample since ``since`` (0 where a queue had no row)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT sampled_at, queue, due FROM {DEPTH_SAMPLE_TABLE}
                WHERE sampled_at >= %s ORDER BY sampled_at""",
            [since],
        )
        rows = cur.fetchall()
    times = sorted({r[0] for r in rows})
    by_queue: dict[str, dict[datetime, int]] = {}
    for at, queue, due in rows:
        by_queue.setdefault(queue, {})[at] = int(due)
    return {q: [(t, v.get(t, 0)) for t in times] for q, v in sorted(by_queue.items())}


def known_queues(using: str | None = None, days: int = 7) -> list[str]:
    """Queues seen in the rollups of the last days (the admin's queue filter)."""
    since = datetime.now(UTC) - timedelta(days=days)
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT queue FROM {STAT_MINUTE_TABLE} WHERE minute >= %s
                UNION SELECT queue FROM {DEPTH_SAMPLE_TABLE} WHERE sampled_at >= %s""",
            [since, since],
        )
        return sorted(r[0] for r in cur.fetchall())
