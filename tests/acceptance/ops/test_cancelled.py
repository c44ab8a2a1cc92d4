"""Bug 2: a handler that saw cancel_requested ends its job CANCELLED by raising Cancelled (it
ended COMPLETED); the Tasks result says FAILED with the Cancelled error."""

import pytest

import django_pgjobs
from django_pgjobs import Cancelled, JobStatus, enqueue, retry
from django_pgjobs.models import Job
from django_pgjobs.registry import get
from tests.conftest import eventually, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_running_job_cancelled_by_its_handler_ends_cancelled(start_worker):
    job = enqueue("test.cancellable", {"seconds": 30})
    w = start_worker("--lease", "3", "--concurrency", "1", "-v", "1")
    eventually(
        lambda: Job.objects.get(pk=job.id).status == JobStatus.RUNNING,
        timeout=30,
        message="job running",
    )
    assert django_pgjobs.cancel(job.id).requested == [job.id]
    eventually(
        lambda: Job.objects.get(pk=job.id).status == JobStatus.CANCELLED,
        timeout=15,
        message="job cancelled",
    )
    w.signal(15)
    assert w.wait(timeout=30) == 0, w.output()[-3000:]
    job.refresh_from_db()
    assert job.attempts == 1 and job.finished_at is not None
    assert "stopped at the operator's request" in job.error
    assert "job.cancelled" in w.output()


def test_cancelled_is_never_retried():
    decision = retry.decide(get("test.cancellable"), 1, 3, Cancelled())
    assert (decision.status, decision.note) == (JobStatus.CANCELLED, "cancelled")


def test_a_task_that_raises_cancelled_fails_with_that_error():
    from tests.testapp.tasks import cancels_itself

    result = cancels_itself.enqueue()
    run_worker()
    result.refresh()
    assert result.status == "FAILED"
    assert result.errors[-1].exception_class_path == "django_pgjobs.exceptions.Cancelled"
    assert Job.objects.get(pk=int(result.id)).status == JobStatus.CANCELLED
