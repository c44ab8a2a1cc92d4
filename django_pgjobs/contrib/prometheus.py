"""Prometheus metrics: ``pip install 'django-pgjobs[prometheus]'``.

Counters and histograms hang off the signals (in the process that sends them: enqueues in web
processes, runs in workers); queue gauges are read from the database at scrape time (cached a
few seconds). A worker started with ``--health-port`` serves them on ``/metrics``; in a web
process, call :func:`install` (e.g. in ``AppConfig.ready``) and route :func:`metrics_view`.

    pgjobs_jobs_enqueued_total{queue,type}
    pgjobs_jobs_finished_total{queue,type,outcome}   completed | completed_with_errors |
                                                     failed | retried | lease_lost | reaped
    pgjobs_job_duration_seconds{queue,type}          histogram of handler run time
    pgjobs_job_wait_seconds{queue,type}              histogram: enqueue -> first start
    pgjobs_queue_depth{queue,state}                  due | scheduled | running | stale
    pgjobs_queue_oldest_due_age_seconds{queue}
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from .. import signals, stats

logger = logging.getLogger("django_pgjobs.metrics")

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

ENQUEUED = Counter("pgjobs_jobs_enqueued", "Jobs enqueued.", ["queue", "type"], registry=None)
FINISHED = Counter(
    "pgjobs_jobs_finished",
    "Runs that ended, by outcome.",
    ["queue", "type", "outcome"],
    registry=None,
)
DURATION = Histogram(
    "pgjobs_job_duration_seconds",
    "Handler run time.",
    ["queue", "type"],
    buckets=_BUCKETS,
    registry=None,
)
WAIT = Histogram(
    "pgjobs_job_wait_seconds",
    "Time from enqueue to the first start of a job.",
    ["queue", "type"],
    buckets=_BUCKETS,
    registry=None,
)

_OUTCOMES = {
    "COMPLETED": "completed",
    "COMPLETED_WITH_ERRORS": "completed_with_errors",
    "FAILED": "failed",
    "PENDING": "retried",
}


def on_enqueued(sender: Any, job: Any, **kwargs: Any) -> None:
    ENQUEUED.labels(job.queue, job.type).inc()


def on_started(sender: Any, job: Any, **kwargs: Any) -> None:
    if job.attempts == 1 and job.created_at is not None:
        WAIT.labels(job.queue, job.type).observe(
            max(0.0, (timezone.now() - job.created_at).total_seconds())
        )


def on_finished(
    sender: Any, job: Any, completion: Any, applied: bool = True, **kwargs: Any
) -> None:
    outcome = (
        _OUTCOMES.get(completion.status, completion.status.lower()) if applied else "lease_lost"
    )
    FINISHED.labels(job.queue, job.type, outcome).inc()
    DURATION.labels(job.queue, job.type).observe(completion.duration_ms / 1000.0)


def on_reaped(sender: Any, job_id: int, status: str, **kwargs: Any) -> None:
    FINISHED.labels("", str(sender), "reaped").inc()


class QueueCollector:
    """Queue depth and oldest due age, read from the database at scrape time."""

    ttl = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Any]] | None = None

    def collect(self) -> Any:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > self.ttl:
                self._cached = (time.monotonic(), self._read())
            yield from self._cached[1]

    def describe(self) -> list[Any]:
        return []  # collected lazily: never touch the database at registration

    def _read(self) -> list[Any]:
        depth = GaugeMetricFamily(
            "pgjobs_queue_depth", "Jobs per queue and state.", labels=["queue", "state"]
        )
        age = GaugeMetricFamily(
            "pgjobs_queue_oldest_due_age_seconds",
            "Age of the oldest due job of the queue.",
            labels=["queue"],
        )
        up = GaugeMetricFamily("pgjobs_stats_up", "1 when the queue gauges could be read.")
        try:
            rows = stats.queue_stats()
        except DatabaseError as exc:
            logger.warning(
                "queue gauges unavailable: %s", exc, extra={"action": "metrics.db_error"}
            )
            up.add_metric([], 0)
            return [up]
        for q in rows:
            for state in ("due", "scheduled", "running", "stale"):
                depth.add_metric([q.queue, state], getattr(q, state))
            age.add_metric([q.queue], q.oldest_due_age_s or 0.0)
        up.add_metric([], 1)
        return [depth, age, up]


_installed: set[int] = set()
_install_lock = threading.Lock()
COLLECTOR = QueueCollector()


def install(registry: CollectorRegistry = REGISTRY) -> None:
    """Register the metrics in ``registry`` and connect the signal receivers (idempotent)."""
    with _install_lock:
        if id(registry) in _installed:
            return
        for metric in (ENQUEUED, FINISHED, DURATION, WAIT, COLLECTOR):
            registry.register(metric)
        _installed.add(id(registry))
        uid = "pgjobs-prometheus"
        signals.job_enqueued.connect(on_enqueued, dispatch_uid=uid)
        signals.job_started.connect(on_started, dispatch_uid=uid)
        signals.job_finished.connect(on_finished, dispatch_uid=uid)
        signals.job_reaped.connect(on_reaped, dispatch_uid=uid)


def available() -> bool:
    return True  # importing this module succeeded: prometheus_client is installed


def render(registry: CollectorRegistry = REGISTRY) -> bytes:
    install(registry)
    return generate_latest(registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Route it behind your own access control: ``path("metrics", metrics_view)``."""
    return HttpResponse(render(), content_type=CONTENT_TYPE_LATEST)
