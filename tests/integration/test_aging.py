"""The aging service's step (worker/maintenance.Aging.run_once): due jobs of an aged queue are
lifted one priority step per `every` seconds they waited, up to `max`; the original priority is
kept in base_priority; other queues, future and running jobs are left alone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from django_pgjobs import enqueue
from django_pgjobs.models import Job
from django_pgjobs.worker.maintenance import Aging, services_for
from django_pgjobs.worker.options import WorkerOptions
from tests.conftest import sql

pytestmark = pytest.mark.django_db

RULES = {"AGING": {"reports": {"every": 60, "max": 3}, "slow": 600}}


def waited(job: Job, seconds: float) -> None:
    sql(
        "UPDATE pgjobs_job SET run_after = now() - %s * interval '1 second' WHERE id = %s",
        [seconds, job.id],
    )


def priority(job: Job) -> tuple[int, int | None]:
    job.refresh_from_db()
    return job.priority, job.base_priority


def test_one_step_per_interval_waited_up_to_the_max(settings):
    settings.PGJOBS = {**settings.PGJOBS, **RULES}
    fresh = enqueue("test.echo", queue="reports", priority=-1)
    one = enqueue("test.echo", queue="reports", priority=-1)
    two = enqueue("test.echo", queue="reports", priority=0)
    capped = enqueue("test.echo", queue="reports", priority=1)
    other = enqueue("test.echo", queue="default")
    later = enqueue("test.echo", queue="reports", run_after=timedelta(hours=1))
    waited(fresh, 30)
    waited(one, 61)
    waited(two, 150)
    waited(capped, 6000)
    waited(other, 6000)
    service = Aging("default", None)
    assert service.run_once() == {"lifted": 3}
    assert priority(fresh) == (-1, None)
    assert priority(one) == (0, -1)
    assert priority(two) == (2, 0)
    assert priority(capped) == (3, 1)
    assert priority(other) == (0, None) and priority(later) == (0, None)
    assert service.run_once() == {"lifted": 0}  # idempotent: nothing more is due yet
    waited(one, 125)  # a second interval: one more step from its base, kept
    assert service.run_once() == {"lifted": 1}
    assert priority(one) == (1, -1)


def test_the_clock_can_be_given_and_running_jobs_are_left_alone(settings):
    settings.PGJOBS = {**settings.PGJOBS, **RULES}
    job = enqueue("test.echo", queue="slow")
    running = enqueue("test.echo", queue="slow")
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        [running.id],
    )
    soon = timezone.now() + timedelta(seconds=1201)
    assert Aging("default", ["slow"]).run_once(now=soon) == {"lifted": 1}
    assert priority(job) == (2, 0) and priority(running) == (0, None)


def test_a_worker_runs_the_service_only_for_its_aged_queues(settings):
    settings.PGJOBS = {**settings.PGJOBS, **RULES}
    names = lambda queues: [  # noqa: E731
        s.name for s in services_for(WorkerOptions.from_settings(queues=queues), None, print)
    ]
    assert "aging" in names(None) and "aging" in names(["reports"])
    assert "aging" not in names(["default"])
    assert Aging("default", None).interval == 30.0


@pytest.mark.django_db(transaction=True)  # committed rows, as ANALYZE sees them in production
def test_the_pass_reads_the_claim_index_by_ranges():
    """Guard: each priority level is a range scan of pgjobs_job_claim_idx (priority = level,
    run_after <= now - every); finished jobs and the whole table are never scanned."""
    from django_pgjobs import queries

    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at) SELECT 'test.noop', 'COMPLETED', now() "
        "FROM generate_series(1, 20000)"
    )
    sql(
        "INSERT INTO pgjobs_job (type, queue, priority) SELECT 'test.noop', "
        "CASE WHEN i % 10 = 0 THEN 'reports' ELSE 'default' END, i % 5 FROM generate_series(1, 20000) i"
    )
    sql("ANALYZE pgjobs_job")
    params = {
        "now": None,
        "queues": ["reports"],
        "every": [60.0],
        "cap": [3],
        "shortest": 60.0,
        "limit": 1000,
    }
    plan = "\n".join(r[0] for r in sql("EXPLAIN " + queries._AGE, params))
    assert "Seq Scan on pgjobs_job " not in plan, plan
    ranges = re.findall(
        r"pgjobs_job_claim_idx.*\n\s+Index Cond: \(\(priority = [^\n]*run_after", plan
    )
    assert ranges, (
        "the aging pass no longer reads each level as a range of the claim index: see the "
        "comment above _AGE in queries.py\n" + plan
    )
