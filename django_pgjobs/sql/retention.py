"""Deletes of retention.py: finished jobs, old schedule fires; small batches (worker rows:
sql/workers.py)."""

from __future__ import annotations

from datetime import datetime

from .. import db
from ..status import TERMINAL_STATUSES
from ..tables import JOB_TABLE, SCHEDULE_FIRE_TABLE

# Short statements that lock only the rows they delete (SKIP LOCKED: an admin viewing or
# retrying a job is never waited for), oldest first through the finished_at index.
_PRUNE = f"""
WITH doomed AS MATERIALIZED (
    SELECT id FROM {JOB_TABLE}
    WHERE status = %(status)s AND finished_at < %(cutoff)s
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {JOB_TABLE} j USING doomed WHERE j.id = doomed.id AND j.status = %(status)s
"""


def prune_jobs(*, status: str, cutoff: datetime, limit: int, using: str | None = None) -> int:
    """Delete up to ``limit`` jobs in a terminal ``status`` that finished before ``cutoff``."""
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"only finished jobs are pruned, not {status!r}")
    with db.cursor(using) as cur:
        cur.execute(_PRUNE, {"status": status, "cutoff": cutoff, "limit": limit})
        return cur.rowcount


def count_prunable(*, status: str, cutoff: datetime, using: str | None = None) -> int:
    with db.cursor(using) as cur:
        cur.execute(f"SELECT count(*) FROM {JOB_TABLE} WHERE status = %s AND finished_at < %s",
                    [status, cutoff])
        return cur.fetchone()[0]


_PRUNE_FIRES = f"""DELETE FROM {SCHEDULE_FIRE_TABLE} WHERE id IN (
    SELECT id FROM {SCHEDULE_FIRE_TABLE} WHERE fire_time < %s LIMIT %s)"""


def prune_fires(cutoff: datetime, *, batch: int, max_batches: int, using: str | None = None) -> int:
    """Delete schedule fire rows older than ``cutoff``; returns how many."""
    return _delete_batches(_PRUNE_FIRES, cutoff, batch, max_batches, using)


def _delete_batches(sql: str, cutoff: datetime, batch: int, max_batches: int,
                    using: str | None) -> int:
    total = 0
    with db.cursor(using) as cur:
        for _ in range(max_batches):
            cur.execute(sql, [cutoff, batch])
            total += cur.rowcount
            if cur.rowcount < batch:
                break
    return total
