"""SQL of retention.py: old schedule fires deleted in small batches, and the count of prunable
jobs (deleting finished jobs changes job state: queries.prune_finished; worker rows:
sql/workers.py)."""

from __future__ import annotations

from datetime import datetime

from .. import db
from ..tables import JOB_TABLE, SCHEDULE_FIRE_TABLE


def count_prunable(*, status: str, cutoff: datetime, using: str | None = None) -> int:
    with db.cursor(using) as cur:
        cur.execute(
            f"SELECT count(*) FROM {JOB_TABLE} WHERE status = %s AND finished_at < %s",
            [status, cutoff],
        )
        return cur.fetchone()[0]


_PRUNE_FIRES = f"""DELETE FROM {SCHEDULE_FIRE_TABLE} WHERE id IN (
    SELECT id FROM {SCHEDULE_FIRE_TABLE} WHERE fire_time < %s LIMIT %s)"""


def prune_fires(cutoff: datetime, *, batch: int, max_batches: int, using: str | None = None) -> int:
    """Delete schedule fire rows older than ``cutoff``; returns how many."""
    return _delete_batches(_PRUNE_FIRES, cutoff, batch, max_batches, using)


def _delete_batches(
    sql: str, cutoff: datetime, batch: int, max_batches: int, using: str | None
) -> int:
    total = 0
    with db.cursor(using) as cur:
        for _ in range(max_batches):
            cur.execute(sql, [cutoff, batch])
            total += cur.rowcount
            if cur.rowcount < batch:
                break
    return total
