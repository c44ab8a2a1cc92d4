"""Rollups: recorded in memory from the signals, one upsert per flush, outliving pruned jobs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from django_pgjobs import enqueue, rollup, stats
from django_pgjobs.models import Job, JobStatMinute, QueueDepthSample
from django_pgjobs.sql import rollups
from tests.conftest import eventually, sql
from tests.support.observability import run_worker

UTC = timezone.utc  # datetime.UTC is Python >= 3.11


def test_histogram_buckets_and_percentiles():
    assert rollup.bucket_of(0.2) == 0 and rollup.bucket_of(1) == 1
    assert rollup.bucket_of(10**12) == rollup.LAST_BUCKET
    hist: list[int] = []
    for ms in range(1, 1001):
        hist = rollup.merge_hist(hist, [0] * rollup.bucket_of(ms) + [1])
    assert rollup.percentile(hist, 0.5) == pytest.approx(500, rel=0.1)
    assert rollup.percentile(hist, 0.95) == pytest.approx(950, rel=0.1)
    assert rollup.percentile([], 0.5) is None


@pytest.mark.django_db
def test_flushes_add_up_and_merge_histograms():
    rec = rollup.Recorder()
    at = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC).timestamp()
    rec.record("q", "t", "completed", 10, at=at)
    rec.record("q", "t", "failed", 1000, at=at)
    assert rec.flush() == 1
    rec.record("q", "t", "completed", 10, at=at + 5)
    rec.record("q", "t", "retried", 1000, at=at + 5)
    rec.flush()
    row = JobStatMinute.objects.get()
    assert row.minute == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert (row.completed, row.failed, row.retried, row.duration_sum_ms) == (2, 1, 1, 2020)
    assert row.duration_hist[rollup.bucket_of(10)] == 2
    assert row.duration_hist[rollup.bucket_of(1000)] == 2
    assert sum(row.duration_hist) == 4
    assert rec.flush() == 0  # nothing new: no statement


@pytest.mark.django_db
def test_a_failed_flush_keeps_the_counts(monkeypatch):
    rec = rollup.Recorder()
    rec.record("q", "t", "completed", 5)

    def broken(*a, **k):
        raise RuntimeError("database down")

    monkeypatch.setattr(rollup, "_upsert", broken)
    with pytest.raises(RuntimeError):
        rec.flush()
    monkeypatch.undo()
    rec.flush()
    assert JobStatMinute.objects.get().completed == 1


@pytest.mark.django_db(transaction=True)
def test_a_worker_run_fills_the_rollup_and_counts_survive_pruning():
    for _ in range(3):
        enqueue("test.behave", {"do": "ok"})
    enqueue("test.behave", {"do": "fail"}, queue="mail")
    run_worker()
    totals = rollup.totals(datetime.now(UTC) - timedelta(hours=1), "queue")
    assert totals["default"]["completed"] == 3 and totals["mail"]["failed"] == 1
    Job.objects.all().delete()  # pruning
    by_queue = {q.queue: q for q in stats.queue_stats()}
    assert by_queue["default"].completed_24h == 3 and by_queue["mail"].failed_24h == 1


@pytest.mark.django_db(transaction=True)
def test_retries_are_counted_per_run():
    job = enqueue("test.behave", {"do": "flaky", "fail_times": 1})
    eventually(
        lambda: run_worker() and Job.objects.get(pk=job.id).status == "COMPLETED",
        message="the retry ran (after its short backoff)",
    )
    t = rollup.totals(datetime.now(UTC) - timedelta(hours=1), "type")["test.behave"]
    assert (t["retried"], t["completed"], t["failed"]) == (1, 1, 0)


@pytest.mark.django_db
def test_reaped_jobs_are_counted():
    job = Job.objects.create(type="test.behave", queue="mail", status="PENDING")
    rec = rollup.Recorder()
    rec.on_reaped(sender="test.behave", job_id=job.id, status="FAILED")
    rec.flush()
    assert JobStatMinute.objects.get().failed == 1
    assert JobStatMinute.objects.get().queue == "mail"


@pytest.mark.django_db
def test_depth_is_sampled_once_a_minute():
    past = datetime.now(UTC) - timedelta(minutes=3)
    Job.objects.create(type="t", queue="a", run_after=past)
    Job.objects.create(type="t", queue="a", run_after=past)
    Job.objects.create(type="t", queue="b", run_after=datetime.now(UTC) + timedelta(hours=1))
    assert rollups.sample_depth() == 2
    assert rollups.sample_depth() == 0  # this minute is taken
    a = QueueDepthSample.objects.get(queue="a")
    assert (a.due, a.scheduled, a.running) == (2, 0, 0) and a.oldest_due_age_s >= 170
    assert QueueDepthSample.objects.get(queue="b").scheduled == 1
    series = rollups.depth_series(datetime.now(UTC) - timedelta(hours=1))
    assert [v for _, v in series["a"]] == [2]


@pytest.mark.django_db
def test_old_rollups_are_pruned():
    rec = rollup.Recorder()
    rec.record("q", "t", "completed", 1, at=(datetime.now(UTC) - timedelta(days=40)).timestamp())
    rec.record("q", "t", "completed", 1)
    rec.flush()
    assert rollups.prune(30) == 1
    assert JobStatMinute.objects.count() == 1


@pytest.mark.django_db
def test_rollup_percentiles_estimate_the_exact_ones():
    sql(
        "INSERT INTO pgjobs_job (type, status, started_at, finished_at, duration_ms) "
        "SELECT 'x', 'COMPLETED', now(), now(), g FROM generate_series(1, 2000) g"
    )
    rec = rollup.Recorder()
    for ms in range(1, 2001):
        rec.record("default", "x", "completed", ms)
    rec.flush()
    exact = {t["type"]: t for t in stats.type_percentiles(24)}["x"]
    estimated = {t["type"]: t for t in stats.type_totals(24)}["x"]
    assert estimated["p50_ms"] == pytest.approx(exact["p50_ms"], rel=0.1)
    assert estimated["p95_ms"] == pytest.approx(exact["p95_ms"], rel=0.1)
