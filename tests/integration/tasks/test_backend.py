"""PgJobsBackend against a real PostgreSQL, inside the test's transaction (pytest's TestCase
flavour): jobs run through the worker's own claim/execute/finalize via testing.run_jobs()."""

import logging
import sys
import traceback
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from django_pgjobs import enqueue, queries, tasks_api
from django_pgjobs.backend import PgJobsBackend
from django_pgjobs.models import Job
from django_pgjobs.status import JobStatus
from django_pgjobs.tasks_api import (
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgjobs.testing import run_jobs
from django_pgjobs.worker.maintenance import reaped_fate
from tests.conftest import sql
from tests.integration.tasks import conformance_tasks as ct
from tests.testapp import tasks as t
from tests.testapp.models import Effect, Execution

pytestmark = pytest.mark.django_db


def job_of(result):
    return Job.objects.get(pk=int(result.id))


# --- enqueue -----------------------------------------------------------------------------------


def test_enqueue_writes_one_job_with_the_task_options():
    result = t.send_welcome.enqueue(42)
    job = job_of(result)
    assert (job.type, job.queue, job.priority, job.status) == (
        "task:tests.testapp.tasks.send_welcome",
        "emails",
        10,
        JobStatus.PENDING,
    )
    assert job.config == {"args": [42], "kwargs": {}, "backend": "default"}
    assert (result.status, result.enqueued_at, result.args) == (
        TaskResultStatus.READY,
        job.created_at,
        [42],
    )
    assert result.task is t.send_welcome and result.backend == "default"


def test_a_rolled_back_enqueue_never_runs():
    with pytest.raises(RuntimeError), transaction.atomic():
        result = t.record.enqueue("rolled back")
        raise RuntimeError("the view failed after enqueueing")
    assert run_jobs() == []
    assert not Effect.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        t.record.get_result(result.id)


def test_run_after_defers_the_task_until_then():
    later = timezone.now() + timedelta(minutes=5)
    result = t.record.using(run_after=later).enqueue("later")
    assert run_jobs() == []
    assert t.record.get_result(result.id).task.run_after == later
    assert [j.id for j in run_jobs(now=later + timedelta(seconds=1))] == [int(result.id)]
    assert t.record.get_result(result.id).return_value == "later"


def test_priority_orders_the_claim():
    for label, priority in [("low", -100), ("mid", 0), ("high", 100), ("mid2", 0)]:
        t.record.using(priority=priority).enqueue(label)
    run_jobs()
    assert list(Effect.objects.order_by("id").values_list("value", flat=True)) == [
        "high",
        "mid",
        "mid2",
        "low",
    ]


def test_unique_key_returns_the_pending_result():
    first = t.sync_user.enqueue(5)
    again = t.sync_user.enqueue(5)
    other = t.sync_user.enqueue(6)
    assert again.id == first.id and other.id != first.id
    per_call = t.sync_user.using(unique_key="manual").enqueue(7)
    assert job_of(per_call).unique_key == "task:tests.testapp.tasks.sync_user|manual"
    run_jobs()
    assert t.sync_user.enqueue(5).id != first.id  # the first one is finished: a new job


def test_max_attempts_per_call():
    assert job_of(t.add.using(max_attempts=9).enqueue(1, 2)).max_attempts == 9
    assert job_of(t.flaky.enqueue(0)).max_attempts == 3


def test_aenqueue_and_aget_result_share_the_callers_transaction():
    result = async_to_sync(t.add.aenqueue)(20, 22)
    run_jobs()
    fetched = async_to_sync(t.add.aget_result)(result.id)
    assert (fetched.status, fetched.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


# --- running -----------------------------------------------------------------------------------


def test_return_value_and_timestamps():
    result = t.add.enqueue(2, 3)
    run_jobs()
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        1,
    )
    assert result.worker_ids == ["pgjobs-testing"]
    assert result.enqueued_at == job_of(result).created_at
    # ordered even inside the test's transaction, whose now() is its start
    assert result.enqueued_at <= result.started_at == result.last_attempted_at
    assert result.started_at <= result.finished_at
    assert result.errors == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("task", [t.add, t.boom])
def test_timestamps_are_ordered_with_committed_rows(task):
    result = task.enqueue(1, 2) if task is t.add else task.enqueue("x")
    run_jobs()
    result.refresh()
    assert result.is_finished
    assert result.enqueued_at <= result.started_at <= result.finished_at


def test_a_task_failing_twice_then_succeeding_shows_three_attempts():
    result = t.flaky.enqueue(2)
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.attempts == 3 and result.return_value == {"attempt": 3, "job_attempts": 3}
    assert [e.exception_class for e in result.errors] == [t.TaskBoom, t.TaskBoom]
    assert "failing attempt 2" in result.errors[1].traceback
    seen = list(Execution.objects.filter(job_id=int(result.id)).values_list("attempt", flat=True))
    assert sorted(seen) == [1, 2, 3]  # TaskContext.attempt, as the function saw it


def test_a_retry_waits_for_its_backoff():
    result = t.record.enqueue("x")
    job = job_of(result)
    sql(
        "UPDATE pgjobs_job SET type = 'task:tests.testapp.tasks.boom', "
        'config = \'{"args": ["first"], "kwargs": {}, "backend": "default"}\', '
        "max_attempts = 2 WHERE id = %s",
        [job.id],
    )
    run_jobs()  # the database clock stands still in this transaction: the retry is not due
    assert t.boom.get_result(result.id).status == TaskResultStatus.READY
    assert t.boom.get_result(result.id).attempts == 1
    run_jobs(now=timezone.now() + timedelta(hours=2))
    failed = t.boom.get_result(result.id)
    assert (failed.status, failed.attempts, len(failed.errors)) == (TaskResultStatus.FAILED, 2, 2)


def test_errors_carry_the_exception_class_path_and_traceback():
    result = t.boom.enqueue("bad input 7")
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "tests.testapp.tasks.TaskBoom"
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert error.traceback.rstrip().endswith("tests.testapp.tasks.TaskBoom: bad input 7")
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_a_return_value_that_is_not_json_fails_without_retry():
    result = t.returns_object.enqueue()
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"  # as Django's own backends
    assert error.exception_class is TypeError
    assert "returned a value that is not JSON" in error.traceback
    assert error.traceback.rstrip().splitlines()[-1].startswith("TypeError: ")


@pytest.mark.parametrize(
    ("task", "path"),
    [(ct.returns_set, "builtins.TypeError"), (ct.returns_nan, "builtins.ValueError")],
)
def test_a_value_that_cannot_be_stored_is_never_retried(task, path):
    result = task.enqueue()
    run_jobs()
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)  # max_attempts=3
    assert [e.exception_class_path for e in result.errors] == [path]


def test_async_task_runs():
    result = t.async_double.enqueue(21)
    run_jobs()
    assert t.async_double.get_result(result.id).return_value == 42


def test_signals_are_sent_at_the_right_moments():
    events = []

    def on_enqueued(sender, task_result, **kwargs):
        events.append(("enqueued", sender, task_result.status, job_of(task_result).status))

    def on_started(sender, task_result, **kwargs):
        events.append(("started", sender, task_result.status, task_result.attempts))

    def on_finished(sender, task_result, **kwargs):
        stored = task_backends["default"].get_result(task_result.id)  # already recorded
        events.append(
            (
                "finished",
                sender,
                task_result.status,
                len(task_result.errors),
                len(stored.errors),
                stored.is_finished,
            )
        )

    task_enqueued.connect(on_enqueued)
    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        t.flaky.enqueue(1)
        run_jobs()
    finally:
        task_enqueued.disconnect(on_enqueued)
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    B, S = PgJobsBackend, TaskResultStatus  # noqa: N806
    assert events == [
        ("enqueued", B, S.READY, JobStatus.PENDING),
        ("started", B, S.RUNNING, 1),
        ("finished", B, S.READY, 1, 1, False),  # a retry is scheduled
        ("started", B, S.RUNNING, 2),
        ("finished", B, S.SUCCESSFUL, 1, 1, True),
    ]


def test_task_finished_of_a_failed_task_is_sent_in_its_exception_context(caplog):
    seen = []

    def on_finished(sender, task_result, **kwargs):
        stored = task_backends["default"].get_result(task_result.id)  # already recorded
        seen.append((task_result.status, stored.status, sys.exc_info()[1]))

    task_finished.connect(on_finished)
    try:
        result = ct.refuse.enqueue("no thanks")
        with caplog.at_level(logging.INFO, logger=tasks_api.MODULE):
            run_jobs()
    finally:
        task_finished.disconnect(on_finished)
    [(status, stored, exc)] = seen
    assert (status, stored) == (TaskResultStatus.FAILED, TaskResultStatus.FAILED)
    assert isinstance(exc, ct.Refused) and str(exc) == "no thanks"
    [record] = [r for r in caplog.records if "state=FAILED" in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info[1] is exc
    frames = [f.name for f in traceback.extract_tb(record.exc_info[2])]
    if sys.version_info < (3, 11):  # the re-raise's frame stays on top of the task's traceback
        assert frames[0] == "_send_finished"
        frames = frames[1:]
    assert frames[-1] == "refuse" and "_send_finished" not in frames  # the task's traceback
    assert sys.exc_info() == (None, None, None)
    assert result.id in record.getMessage()


def test_task_finished_of_a_retried_attempt_carries_its_exception_too():
    seen = []

    def on_finished(sender, task_result, **kwargs):
        seen.append((task_result.status, type(sys.exc_info()[1])))

    task_finished.connect(on_finished)
    try:
        ct.context_probe.enqueue(2)  # fails attempt 1, succeeds on attempt 2
        ct.returns_set.enqueue()
        run_jobs()
    finally:
        task_finished.disconnect(on_finished)
    S = TaskResultStatus  # noqa: N806
    assert sorted(seen, key=str) == [
        (S.FAILED, TypeError),
        (S.READY, ct.Refused),
        (S.SUCCESSFUL, type(None)),
    ]


def test_a_run_whose_lease_was_lost_is_not_reported_finished():
    finished = []

    def on_finished(sender, task_result, **kwargs):
        finished.append(task_result.id)

    task_finished.connect(on_finished)
    try:
        result = ct.loses_its_lease.enqueue()
        run_jobs()
    finally:
        task_finished.disconnect(on_finished)
    assert finished == []  # the worker that holds the lease will report it
    assert job_of(result).status == JobStatus.RUNNING and job_of(result).locked_by == "other"


# --- get_result ----------------------------------------------------------------------------------


@pytest.mark.parametrize("result_id", ["999999999", "not-a-number", "", "-1", "9" * 30])
def test_get_result_of_an_unknown_id(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        t.add.get_result(result_id)


def test_get_result_of_an_unknown_id_leaves_the_transaction_usable():
    with pytest.raises(TaskResultDoesNotExist):
        t.add.get_result("9" * 30)
    assert t.add.get_result(t.add.enqueue(1, 1).id).status == TaskResultStatus.READY


def test_get_result_never_returns_a_handler_job():
    job = enqueue("test.noop")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(job.id))


def test_get_result_of_another_task_is_a_mismatch():
    result = t.add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        t.record.get_result(result.id)


def test_a_task_path_read_from_the_database_is_never_imported():
    job = enqueue("test.noop")
    sql(
        "UPDATE pgjobs_job SET type = 'task:os.system', "
        'config = \'{"args": ["touch /tmp/pwned"], "kwargs": {}}\' WHERE id = %s',
        [job.id],
    )
    with pytest.raises(TaskResultDoesNotExist, match="not registered in this process"):
        task_backends["default"].get_result(str(job.id))
    assert run_jobs() == []  # the claim only takes registered types
    assert Job.objects.get(pk=job.id).status == JobStatus.PENDING


def test_running_cancelled_and_reaped_jobs_map_to_django_statuses():
    running, cancelled, reaped = (t.add.enqueue(i, i) for i in range(3))
    queries.cancel([int(cancelled.id)])
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', attempts = 1, locked_by = 'w-dead', "
        "started_at = now(), lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 hour' WHERE id IN (%s, %s)",
        [int(running.id), int(reaped.id)],
    )
    sql(
        "UPDATE pgjobs_job SET max_attempts = 1, lease_expires_at = now() - interval '1 second' "
        "WHERE id = %s",
        [int(reaped.id)],
    )
    queries.reap(reaped_fate)
    running.refresh(), cancelled.refresh(), reaped.refresh()
    assert (running.status, running.worker_ids) == (TaskResultStatus.RUNNING, ["w-dead"])
    assert (cancelled.status, cancelled.errors) == (TaskResultStatus.FAILED, [])
    assert reaped.status == TaskResultStatus.FAILED and reaped.worker_ids == ["w-dead"]
    assert reaped.errors[0].exception_class_path == "django_pgjobs.exceptions.LeaseLost"


def test_manual_retry_starts_the_attempt_count_again():
    result = t.boom.enqueue("once")
    run_jobs()
    queries.retry_now([int(result.id)])
    result.refresh()
    assert (result.status, result.attempts, result.errors) == (TaskResultStatus.READY, 0, [])
    run_jobs()
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)


def test_check_passes_for_the_test_settings():
    assert list(task_backends["default"].check()) == []
