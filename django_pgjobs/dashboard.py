"""The dashboard's numbers (HTML page and JSON twin), assembled from stats.py and the rollups.

    build(hours)   -> a JSON-ready dict: version, queues, types, failures, workers, series,
                      health (pgjobs_health's verdict and who holds back vacuum)
    charts(data)   -> the SVG charts of that dict
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from django.utils.safestring import SafeString

from . import __version__, charts, health_checks, stats
from .sql import rollups

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

DEFAULT_HOURS = 3
MAX_HOURS = 48


def clamp_hours(value: Any) -> int:
    try:
        hours = int(value)
    except (TypeError, ValueError):
        return DEFAULT_HOURS
    return min(max(hours, 1), MAX_HOURS)


def build(hours: int = DEFAULT_HOURS, using: str | None = None,
          now: datetime | None = None) -> dict[str, Any]:
    now = now or datetime.now(UTC)
    since = now - timedelta(hours=hours)
    minutes = rollups.minute_series(since, now + timedelta(minutes=1), using)
    depth = rollups.depth_series(since, using)
    return {
        "version": __version__,
        "generated_at": now.isoformat(),
        "window_hours": hours,
        "queues": [q.as_dict() for q in stats.queue_stats(using, now)],
        "types_24h": stats.type_durations(24, using),  # rollup: percentiles are estimates
        "failures_by_type_24h": [t for t in stats.type_totals(24, using)
                                 if t["failed"] or t["retried"]],
        "workers": [_iso(w) for w in stats.workers(using)],
        "series": {
            "minutes": [m.isoformat() for m, *_ in minutes],
            "completed": [c for _, c, _, _ in minutes],
            "failed": [f for _, _, f, _ in minutes],
            "retried": [r for _, _, _, r in minutes],
        },
        "queue_depth": {q: [[t.isoformat(), v] for t, v in pts] for q, pts in depth.items()},
        "health": health_checks.summary(using=using),
    }


def _iso(w: dict[str, Any]) -> dict[str, Any]:
    return {**w, "started_at": w["started_at"].isoformat(),
            "last_heartbeat": w["last_heartbeat"].isoformat()}


def charts_for(data: dict[str, Any]) -> dict[str, SafeString]:
    s = data["series"]
    times = [datetime.fromisoformat(m) for m in s["minutes"]]
    has_runs = any(s["completed"]) or any(s["failed"]) or any(s["retried"])
    throughput = [
        charts.Series("completed", list(zip(times, s["completed"], strict=True)), "#2e8b57"),
        charts.Series("failed", list(zip(times, s["failed"], strict=True)), "#c0392b"),
        charts.Series("retried", list(zip(times, s["retried"], strict=True)), "#e08e0b"),
    ] if has_runs else []
    depth = [
        charts.Series(q, [(datetime.fromisoformat(t), v) for t, v in pts])
        for q, pts in data["queue_depth"].items()
    ]
    durations = [
        (t["type"], [("p50", t["p50_ms"]), ("p95", t["p95_ms"])]) for t in data["types_24h"][:20]
    ]
    hours = data["window_hours"]
    until = datetime.fromisoformat(data["generated_at"])
    window = (until - timedelta(hours=hours), until)
    return {
        "throughput": charts.line_chart(throughput, title=f"Runs per minute, last {hours} h",
                                        x_range=window),
        "depth": charts.line_chart(depth, title=f"Due jobs per queue, last {hours} h",
                                   x_range=window),
        "durations": charts.bar_chart(durations, title="Duration per type, last 24 h (p50 / p95)",
                                      unit=" ms"),
    }
