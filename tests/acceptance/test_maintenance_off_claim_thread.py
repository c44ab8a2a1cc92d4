"""Maintenance never starves the heartbeat: while a worker prunes a large backlog and catches up
on thousands of cron fires, its running jobs keep their (short) leases and run once each."""

import signal

import pytest

from django_pgjobs import JobStatus, enqueue_many
from django_pgjobs.models import Job, ScheduleFire
from tests.conftest import eventually, sql, sql_one
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 100_000  # jobs of each finished status, 30 days old: prunable (RETENTION: 1 day)
STATUSES = ["COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED"]
OWED = "6 hours"  # of per-second ticks the schedule has not fired yet
JOBS = 20
OLD = "SELECT count(*) FROM pgjobs_job WHERE finished_at < now() - interval '1 day'"


def owe_maintenance():
    """A prunable backlog and a schedule hours behind (its cursor, in the state row)."""
    sql(
        "INSERT INTO pgjobs_job (type, status, attempts, started_at, finished_at, created_at) "
        "SELECT 'test.noop', s, 1, t, t, t FROM unnest(%s::text[]) s, generate_series(1, %s), "
        "LATERAL (SELECT now() - interval '30 days' AS t) old",
        [STATUSES, BACKLOG],
    )
    sql(
        "INSERT INTO pgjobs_schedule (name, enabled, run_now_requested, next_fire_time, "
        "updated_at) VALUES ('catch-up', true, false, "
        f"date_trunc('second', now()) - interval '{OWED}', now())"
    )


def all_finished(ids):
    return Job.objects.filter(
        id__in=ids, status__in=[JobStatus.COMPLETED, JobStatus.FAILED]
    ).count() == len(ids)


def lease_expirations(ids):
    """(job id, attempt) of every run the reaper took back: its lease had expired."""
    return sql(
        "SELECT id, (h->>'attempt')::int FROM pgjobs_job, jsonb_array_elements(history) h "
        "WHERE id = ANY(%s) AND h->>'outcome' = 'lease_expired' ORDER BY 1, 2",
        [ids],
    )


def notable(worker):
    """The worker's log without its thousands of schedule.fired lines."""
    return "\n".join(line for line in worker.output().splitlines() if "schedule.fired" not in line)[
        -4000:
    ]


def stop(worker):
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()[-5000:]


def test_long_maintenance_passes_do_not_expire_running_jobs(start_worker):
    owe_maintenance()
    ids = enqueue_many("test.behave", [{"do": "sleep", "seconds": 2}] * JOBS)
    # The cluster's other worker: it only reaps (every 0.2 s), as any live worker would.
    reaper = start_worker(
        "--queues",
        "nothing",
        "--no-scheduler",
        "--no-prune",
        "--reap-interval",
        "0.2",
        "--concurrency",
        "1",
        "-v",
        "1",
    )
    worker = start_worker(
        "--settings",
        "tests.acceptance.maintenance_settings",
        "--queues",
        "default",
        "--lease",
        "3",
        "--concurrency",
        "4",
        "--poll-interval",
        "0.2",
        "-v",
        "1",
    )
    eventually(
        lambda: all_finished(ids) or lease_expirations(ids),
        timeout=50,
        interval=0.2,
        message=f"{JOBS} sleeping jobs finished",
    )  # (an expiration fails the test now)
    stop(worker)
    stop(reaper)
    expired = lease_expirations(ids)
    assert expired == [], f"{len(expired)} leases expired: {expired}\n{notable(worker)}"
    outcomes = set(Job.objects.filter(id__in=ids).values_list("status", "attempts"))
    assert outcomes == {(JobStatus.COMPLETED, 1)}, outcomes
    assert Execution.objects.filter(job_id__in=ids).count() == JOBS  # each ran once
    # Not vacuous: maintenance really ran meanwhile (backlog pruned, missed ticks fired).
    assert sql_one(OLD) < BACKLOG * len(STATUSES) and ScheduleFire.objects.exists()
