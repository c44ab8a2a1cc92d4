"""One handler's odd outcome decides its own job's fate, never the worker's nor its batch-mates'.

NUL and lone surrogates in an error, a result or an item error; a Retry with arguments the
database cannot use; a type whose backoff callable breaks. Each bad job runs amid no-op jobs of
its queue under `runjobs --burst` (handlers: tests/testapp/outcome_jobs.py).
"""

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from tests.conftest import sql_one
from tests.testapp.outcome_jobs import TYPE_DELAY

pytestmark = pytest.mark.django_db(transaction=True)

GOOD = 20
# BACKOFF_BASE 600 s: a retried job stays PENDING until the burst ends
WORKER = (
    "--settings",
    "tests.acceptance.outcome_settings",
    "--burst",
    "--concurrency",
    "4",
    "-v",
    "1",
)
GLOBAL_FIRST_DELAY = (540 - 5, 660)  # BACKOFF_BASE 600 s +/- 10% jitter, minus the test's time
RETRY_ERRORS = {  # case -> what the job's error says
    "at-text": ("Retry(at=", "aware datetime"),
    "at-date": ("Retry(at=", "aware datetime"),
    "at-naive": ("Retry(at=", "aware datetime"),
    "delay-inf": ("Retry(delay=", "finite"),
    "delay-nan": ("Retry(delay=", "finite"),
    "delay-huge": ("Retry(delay=", "at most"),
}


def run_amid_good_jobs(start_worker, job_type, case=None, max_attempts=None):
    """Drain one bad job between GOOD no-op jobs; the worker and the good jobs must not notice."""
    good = enqueue_many("test.noop", [{}] * (GOOD // 2))
    bad = enqueue(job_type, {"case": case} if case else {}, max_attempts=max_attempts)
    good += enqueue_many("test.noop", [{}] * (GOOD // 2))
    w = start_worker(*WORKER)
    assert w.wait(timeout=30) == 0, w.output()[-5000:]
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists(), w.output()[-5000:]
    outcomes = set(Job.objects.filter(id__in=good).values_list("status", "attempts"))
    assert outcomes == {(JobStatus.COMPLETED, 1)}, outcomes
    bad.refresh_from_db()
    return bad


def seconds_until_run(job):
    return float(
        sql_one(
            "SELECT extract(epoch FROM run_after - now()) FROM pgjobs_job WHERE id = %s", [job.id]
        )
    )


# --- NUL and lone surrogates: stored as visible escapes -------------------------------------


@pytest.mark.parametrize(
    ("case", "shown"),
    [
        ("nul", r"line 3: 'a\x00b' is not a number"),
        ("surrogate", r"bad \udc80 byte"),
    ],
    ids=["nul", "surrogate"],
)
def test_nul_or_surrogate_in_an_error_is_stored_escaped(start_worker, case, shown):
    bad = run_amid_good_jobs(start_worker, "test.outcome.error", case, max_attempts=1)
    assert (bad.status, bad.attempts) == (JobStatus.FAILED, 1), bad.error
    assert shown in bad.error and "ValueError" in bad.error, bad.error


@pytest.mark.parametrize(
    ("job_type", "case", "status", "key", "stored"),
    [
        ("test.outcome.result", "nul", JobStatus.COMPLETED, "line", "a\\x00b"),
        ("test.outcome.result", "surrogate", JobStatus.COMPLETED, "text", "\\udc80"),
        (
            "test.outcome.item_error",
            None,
            JobStatus.COMPLETED_WITH_ERRORS,
            "errors",
            [{"item": 1, "error": "a\\x00b"}],
        ),
    ],
    ids=["result-nul", "result-surrogate", "item-error-nul"],
)
def test_nul_or_surrogate_in_a_result_is_stored_escaped(
    start_worker, job_type, case, status, key, stored
):
    bad = run_amid_good_jobs(start_worker, job_type, case)
    assert (bad.status, bad.attempts) == (status, 1), bad.error
    assert bad.result[key] == stored, bad.result


# --- a Retry the database cannot use: its construction is the job's error -------------------


@pytest.mark.parametrize("case", list(RETRY_ERRORS))
def test_retry_with_unusable_arguments_retries_on_the_types_backoff(start_worker, case):
    bad = run_amid_good_jobs(start_worker, "test.outcome.retry", case)
    assert (bad.status, bad.attempts) == (JobStatus.PENDING, 1), bad.error
    assert all(part in bad.error for part in RETRY_ERRORS[case]), bad.error
    assert TYPE_DELAY - 5 < seconds_until_run(bad) <= TYPE_DELAY


@pytest.mark.parametrize("case", ["at-date", "delay-inf"])
def test_retry_with_unusable_arguments_on_the_last_attempt_fails(start_worker, case):
    bad = run_amid_good_jobs(start_worker, "test.outcome.retry", case, max_attempts=1)
    assert (bad.status, bad.attempts) == (JobStatus.FAILED, 1), bad.error
    assert all(part in bad.error for part in RETRY_ERRORS[case]), bad.error


def test_retry_made_unusable_after_construction_retries_on_the_types_backoff(start_worker):
    bad = run_amid_good_jobs(start_worker, "test.outcome.mutated_retry")
    assert (bad.status, bad.attempts) == (JobStatus.PENDING, 1), bad.error
    assert "Retry(delay=" in bad.error, bad.error
    assert TYPE_DELAY - 5 < seconds_until_run(bad) <= TYPE_DELAY


# --- a backoff callable that breaks: the global backoff steps in ----------------------------


@pytest.mark.parametrize(
    "job_type", ["test.outcome.policy_divides_by_zero", "test.outcome.policy_infinite"]
)
def test_broken_backoff_callable_falls_back_to_the_global_backoff(start_worker, job_type):
    bad = run_amid_good_jobs(start_worker, job_type)
    assert (bad.status, bad.attempts) == (JobStatus.PENDING, 1), bad.error
    assert "boom" in bad.error and "backoff" in bad.error.lower(), bad.error
    low, high = GLOBAL_FIRST_DELAY
    assert low <= seconds_until_run(bad) <= high
