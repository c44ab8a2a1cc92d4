"""Read-only SQL behind the dashboard's "why does work wait" panels: queue controls and the jobs
they hold back, the wait from due to start per queue, running jobs with their progress, and
pending jobs of types no handler here knows. Each query reads a bounded number of rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import db, flow
from .status import PENDING_SQL, RUNNING_SQL
from .tables import JOB_TABLE, QUEUE_TABLE

WAIT_SAMPLE = 20_000  # newest finished jobs of the window the wait percentiles read
RUNNING_SHOWN = 25
UNKNOWN_COUNT_UP_TO = 100_000


def controls(using: str | None = None) -> dict[str, dict[str, Any]]:
    """{queue: {"paused", "limit", "per_key", "rate", "flow"}} of the queues that have a control
    row or flow controls in PGJOBS["QUEUES"] (the row's values win; docs/flow-control.md)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"SELECT name, paused, concurrency_limit, per_key_limit, rate FROM {QUEUE_TABLE}"
        )
        rows = {r[0]: r[1:] for r in cur.fetchall()}
    declared = flow.queues()
    out = {}
    for name in set(rows) | set(flow.controlled_queues()):
        paused, cap, per_key, rate = rows.get(name, (False, None, None, None))
        d = declared.get(name, flow.FlowSettings())
        per_key = per_key if per_key is not None else d.per_key
        rate = rate if rate is not None else d.rate
        out[name] = {
            "paused": paused,
            "limit": cap if cap is not None else d.concurrency,
            "per_key": per_key,
            "rate": rate,
            "flow": per_key is not None or rate is not None,
        }
    return out


def held_back(due: int, running: int, paused: bool, limit: int | None) -> tuple[int, str]:
    """(due jobs no worker may start now, why): all of them when the queue is paused, those
    beyond the free places when it is at its concurrency limit."""
    if paused:
        return due, "paused"
    if limit is not None:
        held = max(0, due - max(0, limit - running))
        return held, ("limit" if held else "")
    return 0, ""


def wait_percentiles(hours: int, using: str | None = None) -> dict[str, dict[str, Any]]:
    """Per queue, seconds from due (run_after) to start of the runs that started in the window:
    the newest WAIT_SAMPLE finished ones plus the running ones. p50, p95, runs sampled."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""WITH s AS (
                    (SELECT queue, started_at, run_after FROM {JOB_TABLE}
                     WHERE finished_at > now() - %(hours)s * interval '1 hour'
                       AND started_at > now() - %(hours)s * interval '1 hour'
                     ORDER BY finished_at DESC LIMIT %(sample)s)
                    UNION ALL
                    (SELECT queue, started_at, run_after FROM {JOB_TABLE}
                     WHERE status = {RUNNING_SQL} LIMIT %(sample)s)
                )
                SELECT queue,
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY w),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY w), count(*)
                FROM (SELECT queue, GREATEST(EXTRACT(EPOCH FROM started_at - run_after), 0)::float8
                      AS w FROM s WHERE started_at IS NOT NULL) x
                GROUP BY queue""",
            {"hours": hours, "sample": WAIT_SAMPLE},
        )
        return {
            q: {"wait_p50_s": round(p50, 3), "wait_p95_s": round(p95, 3), "wait_runs": n}
            for q, p50, p95, n in cur.fetchall()
        }


def running_jobs(using: str | None = None) -> list[dict[str, Any]]:
    """The longest-running jobs, with what their handlers last reported."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT id, type, queue, locked_by, started_at, lease_expires_at, progress,
                       EXTRACT(EPOCH FROM now() - started_at)::float8
                FROM {JOB_TABLE} WHERE status = {RUNNING_SQL}
                ORDER BY started_at LIMIT %s""",
            [RUNNING_SHOWN],
        )
        cols = (
            "id",
            "type",
            "queue",
            "worker",
            "started_at",
            "lease_expires_at",
            "progress",
            "elapsed_s",
        )
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def unknown_types(
    types: Sequence[str], known: Sequence[str], using: str | None = None
) -> list[dict[str, Any]]:
    """Types in the table that no handler here knows, with their pending jobs (counted up to
    UNKNOWN_COUNT_UP_TO through the type index); types with none pending are left out."""
    out = []
    with db.cursor(using) as cur:
        for t in sorted(set(types) - set(known)):
            cur.execute(
                f"""SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE}
                    WHERE type = %s AND status = {PENDING_SQL} LIMIT %s) c""",
                [t, UNKNOWN_COUNT_UP_TO],
            )
            n = cur.fetchone()[0]
            if n:
                out.append({"type": t, "pending": n, "capped": n >= UNKNOWN_COUNT_UP_TO})
    return out
