"""The dashboard's numbers (HTML page and JSON twin), assembled from stats.py and the rollups.

build(hours)   -> a JSON-ready dict: version, queues (with controls, held-back jobs, wait
                  times), types, failures, workers, running jobs, unknown types, series,
                  health (pgjobs_health's verdict and who holds back vacuum)
charts(data)   -> the SVG charts of that dict
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from django.utils.safestring import SafeString

from . import (
    __version__,
    admin_counts,
    charts,
    dashboard_queries,
    flow,
    health_checks,
    registry,
    rollup,
    stats,
)
from .admin_format import span
from .sql import queues, rollups, workflow_admin
from .status import JobStatus

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

DEFAULT_HOURS = 3
MAX_HOURS = 48
DEFAULT_REFRESH = 15
# Where the docs say which modules a worker imports (the autodiscovery rule).
REGISTERING_DOC = (
    "https://github.com/django-pgjobs/django-pgjobs/blob/main/docs/tasks.md#registering-tasks"
)


def clamp_hours(value: Any) -> int:
    try:
        hours = int(value)
    except (TypeError, ValueError):
        return DEFAULT_HOURS
    return min(max(hours, 1), MAX_HOURS)


def clamp_refresh(value: Any) -> int:
    """Seconds between the page's own refreshes (0: off); default 15."""
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        return DEFAULT_REFRESH
    return 0 if seconds <= 0 else min(max(seconds, 5), 600)


def build(
    hours: int = DEFAULT_HOURS,
    using: str | None = None,
    now: datetime | None = None,
    types: Sequence[str] = (),
) -> dict[str, Any]:
    """Every panel over the same window of ``hours``; ``types``: job types in the table (the
    admin's index scan), checked against the types a worker registers at start (those this
    process registered only later, e.g. by importing a view, no worker knows)."""
    now = now or datetime.now(UTC)
    since = now - timedelta(hours=hours)
    minutes = rollups.minute_series(since, now + timedelta(minutes=1), using)
    depth = rollups.depth_series(since, using)
    return {
        "version": __version__,
        "generated_at": now.isoformat(),
        "window_hours": hours,
        "queues": _queues(hours, since, using, now),
        "types": stats.type_durations(hours, using),  # rollup: percentiles are estimates
        "failures_by_type": [
            t for t in stats.type_totals(hours, using) if t["failed"] or t["retried"]
        ],
        "workers": [_iso(w) for w in stats.workers(using)],
        "running": [_running(r) for r in dashboard_queries.running_jobs(using)],
        "unknown_types": dashboard_queries.unknown_types(types, registry.setup_types(), using),
        "series": {
            "minutes": [m.isoformat() for m, *_ in minutes],
            "completed": [c for _, c, _, _ in minutes],
            "failed": [f for _, _, f, _ in minutes],
            "retried": [r for _, _, _, r in minutes],
        },
        "queue_depth": {q: [[t.isoformat(), v] for t, v in pts] for q, pts in depth.items()},
        "health": health_checks.summary(using=using),
        "workflows": _workflows(hours, using),
    }


def _workflows(hours: int, using: str | None) -> dict[str, Any]:
    """Workflows with a running job, with a job failed in the window; WAITING jobs (exact up
    to admin_counts.EXACT_UP_TO, else estimated, as the job list's tab)."""
    waiting = admin_counts.state_count(JobStatus.WAITING, using)
    return {
        **workflow_admin.dashboard_counts(hours, using),
        "waiting_jobs": waiting.count,
        "estimated": waiting.estimated,
    }


def _queues(
    hours: int,
    since: datetime,
    using: str | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """stats.queue_stats plus the window's counts, controls, held-back jobs, wait times; every
    queue that has jobs or a control row."""
    controls = dashboard_queries.controls(using)
    waits = dashboard_queries.wait_percentiles(hours, using)
    window = rollup.totals(since, "queue", using)
    rows = {q.queue: q.as_dict() for q in stats.queue_stats(using, now)}
    for name in controls:
        rows.setdefault(name, stats.QueueStats(name).as_dict())
    out = []
    for name in sorted(rows):
        q = rows[name]
        c = controls.get(name, {"paused": False, "limit": None, "per_key": None, "rate": None})
        if c.get("flow"):  # per-key limits and rates: counted per key (sql/queues.flow_held)
            f = queues.flow_held(name, using)
            held, why = f.held, f.why
        else:
            held, why = dashboard_queries.held_back(q["due"], q["running"], c["paused"], c["limit"])
        t = window.get(name, {})
        out.append(
            {
                **q,
                "paused": c["paused"],
                "limit": c["limit"],
                "per_key": c.get("per_key"),
                "rate": None if c.get("rate") is None else flow.rate_text(c["rate"]),
                "held_back": held,
                "held_because": why,
                "completed": t.get("completed", 0),
                "failed": t.get("failed", 0),
                "retried": t.get("retried", 0),
                **waits.get(name, {"wait_p50_s": None, "wait_p95_s": None, "wait_runs": 0}),
            }
        )
    return out


def _running(r: dict[str, Any]) -> dict[str, Any]:
    progress = r["progress"]
    if isinstance(progress, str):  # JSONB through a plain cursor may arrive as its text
        try:
            progress = json.loads(progress)
        except ValueError:
            progress = None
    return {
        **r,
        "progress": progress,
        "started_at": r["started_at"].isoformat() if r["started_at"] else None,
        "lease_expires_at": (r["lease_expires_at"].isoformat() if r["lease_expires_at"] else None),
    }


def _iso(w: dict[str, Any]) -> dict[str, Any]:
    return {
        **w,
        "started_at": w["started_at"].isoformat(),
        "last_heartbeat": w["last_heartbeat"].isoformat(),
    }


def charts_for(data: dict[str, Any]) -> dict[str, SafeString]:
    s = data["series"]
    times = [datetime.fromisoformat(m) for m in s["minutes"]]
    has_runs = any(s["completed"]) or any(s["failed"]) or any(s["retried"])
    throughput = (
        [
            charts.Series("completed", list(zip(times, s["completed"], strict=True)), "#2e9a5e"),
            charts.Series("failed", list(zip(times, s["failed"], strict=True)), "#d64a3a"),
            charts.Series("retried", list(zip(times, s["retried"], strict=True)), "#d98a10"),
        ]
        if has_runs
        else []
    )
    depth = [
        charts.Series(q, [(datetime.fromisoformat(t), v) for t, v in pts])
        for q, pts in data["queue_depth"].items()
    ]
    durations = [
        (t["type"], [("p50", t["p50_ms"]), ("p95", t["p95_ms"])])
        for t in data["types"][:20]
        if t["runs"]  # retried only: no finished run, no duration to draw
    ]
    hours = data["window_hours"]
    until = datetime.fromisoformat(data["generated_at"])
    window = (until - timedelta(hours=hours), until)
    return {
        "throughput": charts.line_chart(
            throughput, title=f"Runs per minute, last {hours} h", x_range=window
        ),
        "depth": charts.line_chart(
            depth, title=f"Due jobs per queue, last {hours} h", x_range=window
        ),
        "durations": charts.bar_chart(
            durations,
            title=f"Duration per type, last {hours} h (p50 / p95)",
            unit=" ms",
            fmt=lambda ms: span(ms / 1000),
        ),
    }


def rows_for(data: dict[str, Any]) -> dict[str, Any]:
    """What the HTML page shows beside ``data``: human times, progress bars, queue lists."""
    from django.urls import reverse

    from .admin_format import progress_bar, when
    from .models import Job

    def secs(v: float | None) -> str:
        return "–" if v is None else span(v)

    queues = [
        {
            **q,
            "oldest_due_human": secs(q["oldest_due_age_s"]),
            "wait_p50_human": secs(q["wait_p50_s"]),
            "wait_p95_human": secs(q["wait_p95_s"]),
        }
        for q in data["queues"]
    ]
    running = []
    for r in data["running"]:
        job = Job(
            id=r["id"],
            status="RUNNING",
            progress=r["progress"],
            started_at=datetime.fromisoformat(r["started_at"]) if r["started_at"] else None,
        )
        running.append(
            {
                **r,
                "bar": progress_bar(job),
                "elapsed": secs(r["elapsed_s"]),
                "url": reverse("admin:django_pgjobs_job_change", args=[r["id"]]),
            }
        )
    here = set(registry.registered_types())
    return {
        "generated": when(data["generated_at"]),
        "unknown": [{**u, "known_here": u["type"] in here} for u in data["unknown_types"]],
        "unknown_count": sum(u["pending"] for u in data["unknown_types"]),
        "unknown_capped": any(u["capped"] for u in data["unknown_types"]),
        "unknown_names": ", ".join(u["type"] for u in data["unknown_types"]),
        "registering_doc": REGISTERING_DOC,
        "queues": queues,
        "running": running,
        "workers": [
            {
                **w,
                "queue_names": ", ".join(queue_list(w["queues"])),
                "heartbeat": secs(w["heartbeat_age_s"]),
            }
            for w in data["workers"]
        ],
        "types": [
            {
                **t,
                "p50": secs(None if t["p50_ms"] is None else t["p50_ms"] / 1000),
                "p95": secs(None if t["p95_ms"] is None else t["p95_ms"] / 1000),
            }
            for t in data["types"]
        ],
    }


def queue_list(value: Any) -> list[str]:
    """A worker's queues as a list, whether the driver gave JSONB as a list or as its text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [] if value is None else [str(value)]
