"""SQL of pgjobs_unique, the unique windows (enqueue(unique_for=...)): who holds a key, and
retention of passed windows. Taking a key is part of the job's INSERT (queries.insert_windowed)."""

from __future__ import annotations

from .. import db
from ..tables import UNIQUE_TABLE


def open_window_job(key: str, using: str | None = None) -> int | None:
    """The id of the job that opened ``key``'s window, while the window is open."""
    with db.cursor(using) as cur:
        cur.execute(f"SELECT job_id FROM {UNIQUE_TABLE} WHERE key = %s AND until > now()", [key])
        row = cur.fetchone()
    return None if row is None else row[0]


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
