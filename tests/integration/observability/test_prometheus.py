"""The [prometheus] extra: counters and histograms from the signals, gauges from the database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from django_pgjobs import enqueue
from django_pgjobs.models import Job
from tests.support.observability import require_extra, run_worker

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def prom():
    require_extra("prometheus_client", "prometheus")
    from prometheus_client import CollectorRegistry

    from django_pgjobs.contrib import prometheus

    registry = CollectorRegistry()
    prometheus.install(registry)
    prometheus.COLLECTOR._cached = None
    return prometheus, registry


def value(registry, name, **labels) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_counters_histograms_and_gauges(prom):
    prometheus, registry = prom
    enqueued_before = value(
        registry, "pgjobs_jobs_enqueued_total", queue="default", type="test.behave"
    )
    enqueue("test.behave", {"do": "ok"})
    enqueue("test.behave", {"do": "fail"})
    assert (
        value(registry, "pgjobs_jobs_enqueued_total", queue="default", type="test.behave")
        == enqueued_before + 2
    )
    done_before = value(
        registry,
        "pgjobs_jobs_finished_total",
        queue="default",
        type="test.behave",
        outcome="completed",
    )
    run_worker()
    assert (
        value(
            registry,
            "pgjobs_jobs_finished_total",
            queue="default",
            type="test.behave",
            outcome="completed",
        )
        == done_before + 1
    )
    assert (
        value(
            registry,
            "pgjobs_jobs_finished_total",
            queue="default",
            type="test.behave",
            outcome="failed",
        )
        >= 1
    )
    assert (
        value(registry, "pgjobs_job_duration_seconds_count", queue="default", type="test.behave")
        >= 2
    )
    assert (
        value(registry, "pgjobs_job_wait_seconds_count", queue="default", type="test.behave") >= 2
    )
    Job.objects.create(
        type="test.behave", queue="mail", run_after=datetime.now(UTC) - timedelta(seconds=30)
    )
    prometheus.COLLECTOR._cached = None  # gauges are cached for a few seconds
    text = prometheus.render(registry).decode()
    assert 'pgjobs_queue_depth{queue="mail",state="due"} 1.0' in text
    age = value(registry, "pgjobs_queue_oldest_due_age_seconds", queue="mail")
    assert 29 <= age < 120
    assert value(registry, "pgjobs_stats_up") == 1


def test_install_is_idempotent_and_the_view_serves_text(prom, rf):
    prometheus, registry = prom
    prometheus.install(registry)  # no "Duplicated timeseries" error
    response = prometheus.metrics_view(rf.get("/metrics"))
    assert response.status_code == 200 and b"pgjobs_jobs_enqueued_total" in response.content
