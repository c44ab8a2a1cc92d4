"""Retention: finished jobs pruned by age and status, in small batches, never waiting on locks."""

import io
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction

from django_pgjobs import retention
from django_pgjobs.db import database_now
from django_pgjobs.models import Job, ScheduleFire, Worker
from tests.conftest import sql, sql_one
from tests.support.schedules import entry, utc

pytestmark = pytest.mark.django_db

NOW = utc(2030, 6, 1, 12, 0)


def finished(status: str, days_ago: float, n: int = 1, now=NOW) -> list[int]:
    """Insert ``n`` jobs in ``status`` that finished ``days_ago`` days before ``now``."""
    rows = sql(
        "INSERT INTO pgjobs_job (type, status, finished_at) "
        "SELECT 'test.noop', %s, %s FROM generate_series(1, %s) RETURNING id",
        [status, now - timedelta(days=days_ago), n],
    )
    return [r[0] for r in rows]


def left() -> dict[str, int]:
    return dict(sql("SELECT status, count(*) FROM pgjobs_job GROUP BY status"))


def test_default_policy_keeps_each_status_for_its_days():
    for status in ("COMPLETED", "CANCELLED"):
        finished(status, 8)
        finished(status, 6)
    for status in ("COMPLETED_WITH_ERRORS", "FAILED"):
        finished(status, 31)
        finished(status, 29)
    counts = retention.prune_once(now=NOW)
    assert {k: counts[k] for k in retention.JOB_STATUSES} == {
        "COMPLETED": 1,
        "COMPLETED_WITH_ERRORS": 1,
        "FAILED": 1,
        "CANCELLED": 1,
    }
    assert left() == {"COMPLETED": 1, "CANCELLED": 1, "COMPLETED_WITH_ERRORS": 1, "FAILED": 1}


def test_active_jobs_are_never_pruned_whatever_their_dates():
    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at, created_at, run_after) "
        "VALUES ('test.noop', 'PENDING', %s, %s, %s)",
        [NOW - timedelta(days=400)] * 3,
    )
    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at, lease_token, lease_expires_at) "
        "VALUES ('test.noop', 'RUNNING', %s, gen_random_uuid(), %s)",
        [NOW - timedelta(days=400), NOW],
    )
    retention.prune_once(now=NOW, older_than=0)
    assert left() == {"PENDING": 1, "RUNNING": 1}


def test_the_setting_overrides_a_default_and_none_keeps_forever(settings):
    settings.PGJOBS = {**settings.PGJOBS, "RETENTION": {"FAILED": None, "COMPLETED": 1}}
    finished("FAILED", 3000)
    finished("COMPLETED", 2)
    finished("COMPLETED", 0.5)
    counts = retention.prune_once(now=NOW)
    assert "FAILED" not in counts and counts["COMPLETED"] == 1
    assert left() == {"FAILED": 1, "COMPLETED": 1}


def test_a_pass_deletes_in_batches_and_stops_after_max_batches():
    finished("COMPLETED", 10, n=25)
    assert retention.prune_once(now=NOW, batch=4, max_batches=3)["COMPLETED"] == 12
    assert left() == {"COMPLETED": 13}
    assert retention.prune_once(now=NOW, batch=4, max_batches=None)["COMPLETED"] == 13
    assert left() == {}


def test_a_pass_rests_after_each_full_batch_and_ends_when_told():
    finished("COMPLETED", 10, n=10)
    finished("FAILED", 40, n=2)
    rests = []
    counts = retention.prune_once(
        now=NOW, batch=4, max_batches=None, rest=lambda took: rests.append(took) or True
    )
    assert counts["COMPLETED"] == 10 and counts["FAILED"] == 2
    assert len(rests) == 2 and all(took > 0 for took in rests)  # after 4 and 8, not after 2

    finished("COMPLETED", 10, n=10)
    counts = retention.prune_once(now=NOW, batch=4, max_batches=None, rest=lambda took: False)
    assert counts["COMPLETED"] == 4  # the worker stopping: the pass ends after that batch
    assert left() == {"COMPLETED": 6}


def test_the_workers_pruner_rests_as_long_as_a_batch_took_and_not_once_stopping():
    from django_pgjobs.worker.maintenance import Pruner
    from django_pgjobs.worker.services import ServiceRunner

    pruner = Pruner("default", interval=300)
    runner = ServiceRunner([pruner])
    started = time.monotonic()
    assert pruner.rest(0.2) is True
    assert time.monotonic() - started >= 0.2
    runner.stop()
    started = time.monotonic()
    assert pruner.rest(30) is False
    assert time.monotonic() - started < 5


def test_oldest_jobs_go_first():
    older = finished("COMPLETED", 20, n=3)
    newer = finished("COMPLETED", 10, n=3)
    retention.prune_once(now=NOW, batch=3, max_batches=1)
    assert sorted(Job.objects.values_list("id", flat=True)) == sorted(newer)
    assert not Job.objects.filter(id__in=older).exists()


@pytest.mark.django_db(transaction=True)
def test_a_locked_job_is_skipped_not_waited_for():
    locked, *others = finished("COMPLETED", 10, n=3)
    holding, release = threading.Event(), threading.Event()

    def hold_lock():
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=locked)  # e.g. an admin retrying it
            holding.set()
            release.wait(30)
        connections.close_all()

    t = threading.Thread(target=hold_lock)
    t.start()
    assert holding.wait(10)
    try:
        sql("SET lock_timeout = '2s'")  # a waiting DELETE would fail instead of hang
        counts = retention.prune_once(now=NOW)
    finally:
        release.set()
        t.join(10)
        sql("RESET lock_timeout")
    assert counts["COMPLETED"] == 2
    assert list(Job.objects.values_list("id", flat=True)) == [locked]
    assert retention.prune_once(now=NOW)["COMPLETED"] == 1  # next pass takes it


def test_schedule_fires_are_pruned_past_retention_and_the_widest_catch_up_window(schedules):
    schedules(s=entry(catch_up="all", catch_up_window=60 * 86400))  # 60 days of catch-up
    for days in (10, 40, 70):
        ScheduleFire.objects.create(schedule="s", fire_time=NOW - timedelta(days=days))
    counts = retention.prune_once(now=NOW)
    assert counts["schedule_fires"] == 1  # 70 days > 60 + 1; 40 days is still guarding a tick
    assert sorted((NOW - f.fire_time).days for f in ScheduleFire.objects.all()) == [10, 40]
    schedules(s=entry())
    assert retention.prune_once(now=NOW)["schedule_fires"] == 1  # now past 30 days


def test_workers_silent_for_ten_leases_are_pruned():
    now = database_now()
    lease = 30  # tests/settings.py
    for name, age in (("alive", lease), ("gone", 11 * lease)):
        Worker.objects.create(
            worker_id=name,
            hostname="h",
            pid=1,
            queues=["*"],
            concurrency=1,
            last_heartbeat=now - timedelta(seconds=age),
        )
    assert retention.prune_once(now=now)["workers"] == 1
    assert list(Worker.objects.values_list("worker_id", flat=True)) == ["alive"]


# --- manage.py pgjobs_prune --------------------------------------------------------------------


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("pgjobs_prune", *args, stdout=out)
    return out.getvalue()


def age_jobs_by_db_clock():
    """The command uses the database clock: put jobs at fixed ages from it."""
    now = sql_one("SELECT now()")
    finished("COMPLETED", 8, n=2, now=now)
    finished("FAILED", 3, now=now)
    finished("FAILED", 40, now=now)


def test_dry_run_counts_and_deletes_nothing():
    age_jobs_by_db_clock()
    out = prune("--dry-run")
    assert "would delete 2 COMPLETED jobs finished before" in out
    assert "would delete 1 FAILED jobs" in out
    assert "would delete 0 CANCELLED jobs" in out
    assert left() == {"COMPLETED": 2, "FAILED": 2}


def test_status_and_older_than_narrow_the_prune():
    age_jobs_by_db_clock()
    out = prune("--status", "FAILED", "--older-than", "1")
    assert out == "deleted 2 FAILED jobs\n"
    assert left() == {"COMPLETED": 2}


def test_the_command_prunes_everything_due_and_reports_it():
    age_jobs_by_db_clock()
    out = prune("--batch-size", "1")
    assert "deleted 2 COMPLETED jobs" in out and "deleted 1 FAILED jobs" in out
    assert "deleted 0 stale worker rows" in out
    assert left() == {"FAILED": 1}


def test_statuses_kept_forever_are_said_so(settings):
    settings.PGJOBS = {**settings.PGJOBS, "RETENTION": {"FAILED": None}}
    assert "kept FAILED jobs: no retention set" in prune()
    assert "nothing to prune" in prune("--dry-run", "--status", "FAILED")


@pytest.mark.parametrize(
    "args", [["--status", "RUNNING"], ["--older-than", "-1"], ["--batch-size", "0"]]
)
def test_bad_flags_are_refused(args):
    with pytest.raises(CommandError):
        prune(*args)
