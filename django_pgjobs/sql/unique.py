"""SQL of pgjobs_unique, the unique windows (enqueue(unique_for=...)): who holds a key, and
retention of passed windows. Taking a key is part of the job's INSERT (queries.insert_windowed)."""

from __future__ import annotations

from .. import db
from ..status import ACTIVE_SQL
from ..tables import JOB_TABLE, UNIQUE_TABLE

# An active job of the key first (it holds the key even past its window), else the job that
# opened the key's window while it is open: one round trip for a refused enqueue.
_HOLDER = f"""SELECT COALESCE(
    (SELECT id FROM {JOB_TABLE} WHERE unique_key = %s AND status IN {ACTIVE_SQL}),
    (SELECT job_id FROM {UNIQUE_TABLE} WHERE key = %s AND until > now()))"""


def holder(key: str, using: str | None = None) -> int | None:
    """The id of the job that holds ``key``: an active one, else the window's; None: free."""
    with db.cursor(using) as cur:
        cur.execute(_HOLDER, [key, key])
        return cur.fetchone()[0]


# A passed window is the same as no window (the job table says whether the key is active), so
# its row can go at any time; oldest first, in small batches, skipping a row being taken.
_PRUNE_PASSED = f"""DELETE FROM {UNIQUE_TABLE} WHERE key IN (
    SELECT key FROM {UNIQUE_TABLE} WHERE until <= now() ORDER BY until LIMIT %s
    FOR UPDATE SKIP LOCKED) AND until <= now()"""


def prune_passed(*, batch: int, max_batches: int, using: str | None = None) -> int:
    """Delete rows of windows that have passed; returns how many."""
    total = 0
    with db.cursor(using) as cur:
        for _ in range(max_batches):
            cur.execute(_PRUNE_PASSED, [batch])
            total += cur.rowcount
            if cur.rowcount < batch:
                break
    return total
