"""Opt-in transactional completion: effects and completion commit together or not at all."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgjobs import JobStatus, enqueue, handler
from tests.conftest import run_worker
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def run():
    run_worker(concurrency=1)


def test_effect_and_completion_commit_together():
    job = enqueue("test.tx", {"value": "a"})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED and job.result == {"wrote": 1}
    assert list(Effect.objects.filter(job_id=job.id).values_list("value", flat=True)) == ["a"]


def test_a_raising_handler_leaves_no_effect():
    job = enqueue("test.tx", {"raise": True})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and "rolled back with the job" in job.error
    assert not Effect.objects.filter(job_id=job.id).exists()


def test_lost_lease_rolls_the_effect_back():
    job = enqueue("test.tx", {"steal": True})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING  # owned by whoever stole it; we overwrote nothing
    assert not Effect.objects.filter(job_id=job.id).exists()


def test_async_handlers_cannot_be_transactional():
    with pytest.raises(ImproperlyConfigured, match="sync handler"):

        @handler("test.bad_tx", transactional=True)
        async def bad(job):
            return None
