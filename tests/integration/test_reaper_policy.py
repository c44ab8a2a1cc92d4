"""A reaped attempt gets the same retry decision as a raised exception: its type's policy."""

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many, queries
from django_pgjobs.models import Job
from tests.conftest import sql

pytestmark = pytest.mark.django_db(transaction=True)


def reap():
    from django_pgjobs.worker.maintenance import Reaper  # the reaper of the worker's split

    return Reaper(using="default").run_once()


def expire(job_type, n=1):
    """Claim ``n`` due jobs of ``job_type`` as a worker that then died: lease already expired."""
    rows = queries.claim(
        worker_id="w-dead", types=[job_type], queues=None, limit=n, lease_seconds=30
    )
    assert len(rows) == n
    ids = [r.id for r in rows]
    sql(
        "UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 second' WHERE id = ANY(%s)",
        [ids],
    )
    return ids


def delays(ids):
    """Seconds from now until each job runs again."""
    return [
        float(d)
        for (d,) in sql(
            "SELECT extract(epoch FROM run_after - now()) "
            "FROM pgjobs_job WHERE id = ANY(%s) ORDER BY id",
            [ids],
        )
    ]


def test_backoff_callable_of_the_type_sets_the_delay():
    enqueue("test.outcome.reap_fixed", {})
    ids = expire("test.outcome.reap_fixed")
    assert reap() == {"rescued": 1, "failed": 0}
    job = Job.objects.get(pk=ids[0])
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert abs(delays(ids)[0] - 1234) <= 2
    assert job.history[-1]["outcome"] == "lease_expired"


def test_backoff_base_of_the_type_applies_with_jitter():
    enqueue_many("test.outcome.reap_base", [{}] * 20)
    ids = expire("test.outcome.reap_base", n=20)
    assert reap() == {"rescued": 20, "failed": 0}
    found = delays(ids)
    assert all(90 - 1 <= d <= 110 for d in found), found  # 100 s +/- 10%
    assert len({round(d, 3) for d in found}) > 1, found  # jittered, not all equal


def test_backoff_max_of_the_type_caps_the_delay():
    enqueue("test.outcome.reap_capped", {})
    ids = expire("test.outcome.reap_capped")
    assert reap() == {"rescued": 1, "failed": 0}
    assert 7 * 0.9 - 1 <= delays(ids)[0] <= 7 * 1.1  # capped at 7 s, then +/- 10%


def test_lease_expired_on_the_last_attempt_fails_the_job():
    enqueue("test.outcome.reap_fixed", {}, max_attempts=1)
    ids = expire("test.outcome.reap_fixed")
    assert reap() == {"rescued": 0, "failed": 1}
    job = Job.objects.get(pk=ids[0])
    assert job.status == JobStatus.FAILED and job.finished_at is not None
    assert "lease expired" in job.error, job.error


def test_a_type_this_worker_does_not_know_is_left_to_others_for_two_reap_intervals():
    """Within the grace a worker that knows the type (and its policy) gets the first go."""
    ids = [
        i
        for (i,) in sql(
            "INSERT INTO pgjobs_job (type, status, attempts, max_attempts, locked_by, started_at, "
            "lease_token, lease_expires_at) SELECT 'test.outcome.nobody', 'RUNNING', 1, 5, 'w-dead', "
            "now() - interval '1 minute', gen_random_uuid(), now() - interval '15 seconds' "
            "FROM generate_series(1, 3) RETURNING id"
        )
    ]
    enqueue("test.outcome.reap_fixed", {})
    known = expire("test.outcome.reap_fixed")
    from django_pgjobs.worker.maintenance import Reaper

    assert Reaper(using="default", interval=10).run_once() == {"rescued": 1, "failed": 0}
    assert Job.objects.get(pk=known[0]).status == JobStatus.PENDING  # its own type: at once
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {"RUNNING"}
    assert Reaper(using="default", interval=5).run_once() == {"rescued": 3, "failed": 0}


def test_jobs_of_a_type_registered_nowhere_get_the_global_policy(settings):
    settings.PGJOBS = {**settings.PGJOBS, "BACKOFF_BASE": 50.0, "BACKOFF_MAX": 3600.0}
    ids = [
        i
        for (i,) in sql(  # RUNNING rows no handler here knows (another deployment's type)
            "INSERT INTO pgjobs_job (type, status, attempts, max_attempts, locked_by, started_at, "
            "lease_token, lease_expires_at) SELECT 'test.outcome.nobody', 'RUNNING', 1, 5, 'w-dead', "
            "now() - interval '2 minutes', gen_random_uuid(), now() - interval '1 minute' "
            "FROM generate_series(1, 10) RETURNING id"
        )
    ]  # expired past the grace (2 x 10 s)
    assert reap() == {"rescued": 10, "failed": 0}
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {"PENDING"}
    found = delays(ids)
    assert all(45 - 1 <= d <= 55 for d in found), found  # BACKOFF_BASE 50 s +/- 10% jitter
    assert len({round(d, 3) for d in found}) > 1, found  # jittered like any retry


@pytest.mark.django_db(transaction=False)
def test_a_job_failed_by_the_reaper_finishes_after_it_started_inside_one_transaction():
    """Inside a TestCase's transaction now() stands still: the reaper stamps the end with the
    clock the claim stamped the start with."""
    enqueue("test.outcome.reap_fixed", {}, max_attempts=1)
    ids = expire("test.outcome.reap_fixed")
    assert reap() == {"rescued": 0, "failed": 1}
    job = Job.objects.get(pk=ids[0])
    assert job.created_at <= job.started_at <= job.finished_at
