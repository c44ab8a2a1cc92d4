"""The queue's numbers, read-only: what `pgjobs_stats`, the dashboard and the metrics show.

Live numbers come from the jobs table through its partial indexes (pending/running jobs only);
percentiles use the seed's query on the stats index (an index-only scan of the jobs finished in
the window); completed/failed counts come from the rollup (``rollup.py``), so that they survive
the pruning of old jobs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from . import db, rollup
from .sql import rollups as sql_rollups
from .sql import workers as sql_workers
from .status import FAILED_SQL
from .tables import JOB_TABLE

UTC = timezone.utc  # datetime.UTC is Python >= 3.11


@dataclass
class QueueStats:
    queue: str
    due: int = 0  # PENDING, run_after passed
    scheduled: int = 0  # PENDING, run_after in the future
    running: int = 0
    stale: int = 0  # RUNNING with an expired lease (the reaper will rescue them)
    oldest_due_age_s: float | None = None
    completed_24h: int = 0
    failed_24h: int = 0
    retried_24h: int = 0
    throughput_per_min: float = 0.0  # completed per minute over the last 15 minutes

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def queue_stats(using: str | None = None, now: datetime | None = None) -> list[QueueStats]:
    """Per queue: live depth from the jobs table, 24 h counts and throughput from the rollup."""
    now = now or datetime.now(UTC)
    by_queue: dict[str, QueueStats] = {}
    for queue, due, scheduled, running, stale, oldest in sql_rollups.depth_by_queue(using):
        by_queue[queue] = QueueStats(
            queue, due, scheduled, running, stale, None if oldest is None else round(oldest, 3)
        )
    for queue, t in rollup.totals(now - timedelta(hours=24), "queue", using).items():
        s = by_queue.setdefault(queue, QueueStats(queue))
        s.completed_24h, s.failed_24h, s.retried_24h = t["completed"], t["failed"], t["retried"]
    for queue, t in rollup.totals(now - timedelta(minutes=15), "queue", using).items():
        by_queue.setdefault(queue, QueueStats(queue)).throughput_per_min = round(
            t["completed"] / 15.0, 2
        )
    return [by_queue[q] for q in sorted(by_queue)]


# The seed's query (section 5), on the seed's stats index: an index-only scan.
_PERCENTILES = f"""
SELECT type,
       count(*) AS runs,
       percentile_cont(0.50) WITHIN GROUP (ORDER BY duration_ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95,
       count(*) FILTER (WHERE status = {FAILED_SQL}) AS failures
FROM {JOB_TABLE}
WHERE finished_at > now() - %s * interval '1 hour'
GROUP BY type
ORDER BY p95 DESC NULLS LAST, type
"""


def type_percentiles(hours: float = 24, using: str | None = None) -> list[dict[str, Any]]:
    """Per job type over the last ``hours``: runs, p50/p95 duration (ms), failures."""
    with db.cursor(using) as cur:
        cur.execute(_PERCENTILES, [hours])
        return [
            {
                "type": t,
                "runs": runs,
                "p50_ms": None if p50 is None else round(p50, 1),
                "p95_ms": None if p95 is None else round(p95, 1),
                "failures": failures,
            }
            for t, runs, p50, p95, failures in cur.fetchall()
        ]


def type_durations(hours: float = 24, using: str | None = None) -> list[dict[str, Any]]:
    """type_percentiles' rows from the rollup: runs, failures and p50/p95 estimated from the
    duration histogram, without reading the jobs finished in the window (the dashboard)."""
    rows = [
        {
            "type": t["type"],
            "runs": t["completed"] + t["failed"],
            "p50_ms": t["p50_ms"],
            "p95_ms": t["p95_ms"],
            "failures": t["failed"],
            "estimated": True,
        }
        for t in type_totals(hours, using)
    ]
    rows.sort(key=lambda r: (-(r["p95_ms"] or 0), r["type"]))
    return rows


def type_totals(hours: float = 24, using: str | None = None) -> list[dict[str, Any]]:
    """Per job type from the rollup (survives pruning): completed / failed / retried runs and
    p50/p95 estimated from the duration histogram."""
    since = datetime.now(UTC) - timedelta(hours=hours)
    out = []
    for t, v in sorted(rollup.totals(since, "type", using).items()):
        out.append(
            {
                "type": t,
                "completed": v["completed"],
                "failed": v["failed"],
                "retried": v["retried"],
                "p50_ms": _round(rollup.percentile(v["hist"], 0.50)),
                "p95_ms": _round(rollup.percentile(v["hist"], 0.95)),
            }
        )
    out.sort(key=lambda r: (-r["failed"], r["type"]))
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def workers(using: str | None = None) -> list[dict[str, Any]]:
    """Workers that wrote a heartbeat row; ``alive`` as sql/workers.py defines it."""
    return [
        {
            "worker_id": w,
            "hostname": h,
            "pid": pid,
            "queues": q,
            "concurrency": c,
            "started_at": s,
            "last_heartbeat": hb,
            "jobs_done": done,
            "heartbeat_age_s": round(age, 1),
            "alive": alive,
        }
        for w, h, pid, q, c, s, hb, done, age, alive in sql_workers.list_workers(using)
    ]


def snapshot(using: str | None = None) -> dict[str, Any]:
    """The numbers of `manage.py pgjobs_stats` (and of the dashboard's summary)."""
    return {
        "generated_at": datetime.now(UTC).isoformat(),
        "queues": [q.as_dict() for q in queue_stats(using)],
        "types_24h": type_percentiles(24, using),
        "workers": [
            {
                **w,
                "started_at": w["started_at"].isoformat(),
                "last_heartbeat": w["last_heartbeat"].isoformat(),
            }
            for w in workers(using)
        ],
    }
