"""The worker survives what goes wrong around a job: a batch the database refuses, a receiver
that raises, a bug in a step. In-process, burst mode, real PostgreSQL."""

import logging

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many, handler, registry, signals
from django_pgjobs.models import Job
from django_pgjobs.worker import executor, producer
from tests.conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def nul_error():
    @handler("test.resilience.nul", max_attempts=1)
    def nul(job):
        raise ValueError("line 3: 'a\x00b'")

    yield "test.resilience.nul"
    registry.unregister("test.resilience.nul")


def test_a_batch_the_database_refuses_is_written_job_by_job(nul_error, monkeypatch, caplog):
    """With the escaping switched off, the NUL reaches the finalize, which PostgreSQL refuses:
    the batch is written again one job at a time, and only the offending job fails."""
    monkeypatch.setattr(executor, "storable_text", lambda text: text)
    good = enqueue_many("test.noop", [{}] * 10)
    bad = enqueue(nul_error, {})
    with caplog.at_level(logging.ERROR, logger="django_pgjobs.worker"):
        run_worker(concurrency=4)
    assert set(Job.objects.filter(id__in=good).values_list("status", "attempts")) == {
        (JobStatus.COMPLETED, 1)
    }
    bad.refresh_from_db()
    assert bad.status == JobStatus.FAILED and bad.attempts == 1
    assert "could not store this run's outcome" in bad.error and "\\x00" in bad.error
    assert any(getattr(r, "action", "") == "worker.batch_refused" for r in caplog.records)


def test_a_receiver_that_raises_is_logged_and_the_batch_goes_on(caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.job_finished.connect(broken, dispatch_uid="test.broken")
    signals.job_started.connect(broken, dispatch_uid="test.broken")
    try:
        ids = enqueue_many("test.noop", [{}] * 6)
        with caplog.at_level(logging.ERROR, logger="django_pgjobs.worker"):
            run_worker()
    finally:
        signals.job_finished.disconnect(dispatch_uid="test.broken")
        signals.job_started.disconnect(dispatch_uid="test.broken")
    assert Job.objects.filter(id__in=ids, status=JobStatus.COMPLETED).count() == 6
    assert "receiver bug" in caplog.text


def test_an_unexpected_error_in_a_step_is_logged_and_the_worker_goes_on(monkeypatch, caplog):
    real = producer.Producer.finalize_and_claim
    calls = []

    def once_broken(self, completions, limit):
        calls.append(limit)
        if len(calls) == 1:
            raise KeyError("bug in the claim")
        return real(self, completions, limit)

    monkeypatch.setattr(producer.Producer, "finalize_and_claim", once_broken)
    ids = enqueue_many("test.noop", [{}] * 5)
    with caplog.at_level(logging.ERROR, logger="django_pgjobs.worker"):
        run_worker()
    assert Job.objects.filter(id__in=ids, status=JobStatus.COMPLETED).count() == 5
    assert (
        "unexpected error in the worker loop" in caplog.text and "bug in the claim" in caplog.text
    )
