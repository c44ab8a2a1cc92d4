"""Issue 26.4: a reaped job's retry decision does not depend on which worker reaps it. Two real
`runjobs` with different registries: the one that does not know a type leaves its expired
lease to one that does (which applies the type's own backoff) for two reap intervals."""

import signal

import pytest

from django_pgjobs import JobStatus, enqueue, queries
from django_pgjobs.models import Job
from tests.conftest import eventually, sql

pytestmark = pytest.mark.django_db(transaction=True)

FOREIGN = ("--settings", "tests.acceptance.foreign_settings")


def running_with_expired_lease(job_type, expired_ago):
    enqueue(job_type, {})
    (row,) = queries.claim(
        worker_id="w-dead", types=[job_type], queues=None, limit=1, lease_seconds=30
    )
    sql(
        "UPDATE pgjobs_job SET lease_expires_at = now() - %s * interval '1 second' WHERE id = %s",
        [expired_ago, row.id],
    )
    return row.id


def foreign_type_job(expired_ago):
    """A RUNNING job of a type no process here registers, its lease expired ``expired_ago`` s."""
    return sql(
        "INSERT INTO pgjobs_job (type, status, attempts, max_attempts, locked_by, "
        "started_at, lease_token, lease_expires_at) VALUES ('test.outcome.nobody', "
        "'RUNNING', 1, 5, 'w-dead', now() - interval '1 hour', gen_random_uuid(), "
        "now() - %s * interval '1 second') RETURNING id",
        [expired_ago],
    )[0][0]


def status(job_id):
    return Job.objects.get(pk=job_id).status


def delay(job_id):
    return float(
        sql("SELECT extract(epoch FROM run_after - now()) FROM pgjobs_job WHERE id = %s", [job_id])[
            0
        ][0]
    )


def test_a_worker_that_does_not_know_the_type_leaves_it_to_one_that_does(start_worker):
    known = running_with_expired_lease("test.outcome.reap_fixed", expired_ago=1)  # backoff 1234
    marker = foreign_type_job(expired_ago=3600)  # long past any grace: proves a reap pass ran
    ignorant = start_worker(*FOREIGN, "--reap-interval", "30")
    eventually(
        lambda: status(marker) == JobStatus.PENDING,
        timeout=60,
        message="the foreign worker's reaper rescued the long-expired job",
    )
    ignorant.signal(signal.SIGTERM)
    assert ignorant.wait(timeout=60) == 0, ignorant.output()
    assert status(known) == JobStatus.RUNNING, ignorant.output()  # left to a knowing worker

    knowing = start_worker("--burst")
    assert knowing.wait(timeout=60) == 0, knowing.output()
    job = Job.objects.get(pk=known)
    assert job.status == JobStatus.PENDING and job.history[-1]["outcome"] == "lease_expired"
    assert abs(delay(known) - 1234) <= 5, delay(known)  # the type's backoff, not the global


def test_past_the_grace_a_worker_that_does_not_know_the_type_rescues_it(start_worker):
    """Nobody that knows the type is running: the job is not stranded, it gets the global
    policy once its lease is two reap intervals past its expiry."""
    known = running_with_expired_lease("test.outcome.reap_fixed", expired_ago=30)
    ignorant = start_worker(*FOREIGN, "--burst", "--reap-interval", "10")
    assert ignorant.wait(timeout=60) == 0, ignorant.output()
    assert status(known) == JobStatus.PENDING
    assert delay(known) < 5, delay(known)  # tests.settings' global backoff (0.05 .. 0.2 s)
