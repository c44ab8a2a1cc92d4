"""django_pgjobs.testing and its pytest fixtures, for both APIs, inside a test transaction."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import TestCase
from django.utils import timezone

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.contrib.pytest_plugin import pgjobs, pgjobs_eager  # noqa: F401 - fixtures
from django_pgjobs.tasks_api import TaskResultStatus
from django_pgjobs.testing import (
    assert_enqueued,
    assert_not_enqueued,
    capture_enqueued,
    eager,
    run_jobs,
)
from tests.testapp import tasks as t
from tests.testapp.models import Effect


class InsideDjangoTestCase(TestCase):
    """The helpers in a plain django.test.TestCase: jobs live in the test's transaction."""

    def test_enqueue_assert_run(self):
        result = t.send_welcome.enqueue(7)
        assert_enqueued(t.send_welcome, args=[7], queue="emails", priority=10)
        assert_not_enqueued(t.send_welcome, args=[8])
        ran = run_jobs()
        self.assertEqual([j.status for j in ran], [JobStatus.COMPLETED])
        self.assertEqual(t.send_welcome.get_result(result.id).status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(Effect.objects.filter(value="welcome:7").exists())

    def test_eager(self):
        with eager():
            result = t.add.enqueue(1, 2)
            job = enqueue("test.echo", {"n": 1})
        self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, 3))
        self.assertEqual((job.status, job.result), (JobStatus.COMPLETED, {"echo": {"n": 1}}))


pytestmark = pytest.mark.django_db


# --- assert_enqueued / assert_not_enqueued -------------------------------------------------------


def test_assert_enqueued_matches_tasks_by_arguments():
    t.add.enqueue(1, b=2)
    t.add.enqueue(1, b=2)
    assert len(assert_enqueued(t.add, args=(1,), kwargs={"b": 2}, count=2)) == 2
    assert_enqueued(t.add, status=JobStatus.PENDING)
    assert_not_enqueued(t.add, args=[2])
    assert_not_enqueued(t.record)


def test_assert_enqueued_matches_handler_jobs_by_config():
    enqueue("test.echo", {"a": 1}, queue="emails")
    assert_enqueued("test.echo", config={"a": 1}, queue="emails", count=1)
    assert_not_enqueued("test.echo", config={"a": 2})


def test_a_failed_assertion_lists_what_was_enqueued():
    t.add.enqueue(1, 2)
    enqueue("test.echo", {"a": 1})
    with pytest.raises(AssertionError) as failure:
        assert_enqueued(t.add, args=[9, 9])
    message = str(failure.value)
    assert (
        "expected at least one job(s) matching task:tests.testapp.tasks.add args=[9, 9]" in message
    )
    assert "task:tests.testapp.tasks.add#" in message and "args=[1, 2] kwargs={}" in message
    assert "test.echo#" in message and "config={'a': 1}" in message
    with pytest.raises(AssertionError, match="expected 0 job"):
        assert_not_enqueued(t.add)


def test_a_rolled_back_enqueue_is_not_enqueued():
    with transaction.atomic():
        t.add.enqueue(1, 2)
        transaction.set_rollback(True)
    assert_not_enqueued(t.add)


# --- capture_enqueued --------------------------------------------------------------------------


def test_capture_sees_only_the_block_and_every_enqueue_path():
    t.add.enqueue(0, 0)
    with capture_enqueued() as jobs:
        t.add.enqueue(1, 1)
        enqueue_many("test.echo", [{"i": 1}, {"i": 2}])
        t.sync_user.enqueue(3)
        t.sync_user.enqueue(3)  # deduplicated: nothing new
    t.add.enqueue(2, 2)
    assert [j.type for j in jobs] == [
        "task:tests.testapp.tasks.add",
        "test.echo",
        "test.echo",
        "task:tests.testapp.tasks.sync_user",
    ]
    jobs.assert_enqueued(t.add, args=[1, 1], count=1)
    jobs.assert_not_enqueued(t.add, args=[0, 0])
    jobs.assert_enqueued("test.echo", config={"i": 2})


# --- run_jobs ----------------------------------------------------------------------------------


def test_run_jobs_runs_handler_jobs_through_the_worker():
    job = enqueue("test.behave", {"do": "flaky", "fail_times": 1})
    run_jobs()  # the retry's backoff is in the future of the (frozen) database clock
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    [ran] = run_jobs(now=timezone.now() + timedelta(minutes=1))
    assert (ran.id, ran.status, ran.attempts) == (job.id, JobStatus.COMPLETED, 2)


def test_run_jobs_by_queue():
    t.send_welcome.enqueue(1)
    t.add.enqueue(1, 1)
    assert [j.queue for j in run_jobs(queues=["emails"])] == ["emails"]
    assert_enqueued(t.add, status=JobStatus.PENDING)


def test_run_jobs_needs_an_aware_now():
    with pytest.raises(ValueError, match="aware datetime"):
        run_jobs(now=timezone.now().replace(tzinfo=None))


def test_run_jobs_stops_a_job_that_enqueues_itself_forever():
    t.forever.enqueue(0)
    with pytest.raises(RuntimeError, match="ran more than 3 jobs and more are due"):
        run_jobs(max_jobs=3)


def test_eager_runs_jobs_enqueued_by_jobs_in_the_same_loop():
    with eager():
        result = t.countdown.enqueue(3)  # the nested enqueues are claimed by the same run_jobs()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert_enqueued(t.countdown, status=JobStatus.COMPLETED, count=4)


def test_eager_leaves_deferred_tasks_for_later():
    with eager():
        later = t.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
        now = t.add.enqueue(2, 2)
    assert (later.status, now.status) == (TaskResultStatus.READY, TaskResultStatus.SUCCESSFUL)


# --- pytest fixtures ---------------------------------------------------------------------------


def test_pgjobs_fixture(pgjobs):  # noqa: F811
    with pgjobs.capture() as jobs:
        result = t.add.enqueue(3, 4)
    pgjobs.assert_enqueued(t.add, args=[3, 4])
    assert len(jobs) == 1 and len(pgjobs.jobs) == 1
    pgjobs.run()
    assert t.add.get_result(result.id).return_value == 7


def test_pgjobs_eager_fixture(pgjobs_eager):  # noqa: F811
    assert t.add.enqueue(5, 5).return_value == 10
