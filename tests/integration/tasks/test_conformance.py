"""PgJobsBackend against Django's DOCUMENTED Tasks behaviour (docs/topics/tasks and docs/ref/tasks
of Django 6.0), one claim of the docs per test, with real PostgreSQL and the worker's own code
(``run_jobs()``; a real in-process worker where committed rows matter).

The differences chosen on purpose are tested too, under "Differences", and explained in
docs/tasks.md: retries by default, a path read from the database is never imported.
"""

import sys
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from django_pgjobs import conf, enqueue, tasks_api
from django_pgjobs.backend import PgJobsBackend
from django_pgjobs.models import Job
from django_pgjobs.tasks_api import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_pgjobs.testing import run_jobs
from tests.conftest import eventually, run_worker, sql
from tests.integration.tasks import conformance_tasks as ct

pytestmark = pytest.mark.django_db
S = TaskResultStatus


def done(result):
    """Run what is due, then the result as the backend has it now."""
    run_jobs()
    result.refresh()
    return result


@pytest.fixture
def signals_seen():
    """Every Tasks signal sent, as (signal name, sender, status, result id, exception)."""
    seen = []

    def receiver(name):
        def on(sender, task_result, **kwargs):
            seen.append((name, sender, task_result.status, task_result.id, sys.exc_info()[1]))

        return on

    receivers = {
        s: receiver(n)
        for s, n in [
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        ]
    }
    for signal, on in receivers.items():
        signal.connect(on)
    yield seen
    for signal, on in receivers.items():
        signal.disconnect(on)


# --- the backend and its feature flags -------------------------------------------------------


def test_the_feature_flags_say_what_the_backend_supports():
    backend = task_backends["default"]
    assert isinstance(backend, PgJobsBackend) and default_task_backend.alias == "default"
    assert (
        backend.supports_defer,
        backend.supports_async_task,
        backend.supports_get_result,
        backend.supports_priority,
    ) == (True, True, True, True)


# --- enqueue and results -------------------------------------------------------------------


def test_enqueue_returns_a_ready_result_that_has_not_run():
    result = ct.echo.enqueue(1, (2, 3), key={"a": [4]})
    assert result.status == S.READY and not result.is_finished
    assert isinstance(result.id, str) and 0 < len(result.id) < 64
    assert result.task.func is ct.echo.func and result.backend == "default"
    assert (result.args, result.kwargs) == ([1, [2, 3]], {"key": {"a": [4]}})  # as JSON
    assert result.enqueued_at is not None
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None,) * 3
    assert (result.attempts, result.worker_ids, result.errors) == (0, [], [])
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018


def test_a_successful_result_has_its_return_value_and_times():
    result = done(ct.echo.enqueue(1, x="y"))
    assert result.status == S.SUCCESSFUL and result.is_finished
    assert result.return_value == {"args": [1], "kwargs": {"x": "y"}}  # tuples become lists
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert (result.attempts, len(result.worker_ids), result.errors) == (1, 1, [])


def test_refresh_updates_the_result_in_place_and_get_result_reads_it_anew():
    result = ct.echo.enqueue("a")
    fetched = ct.echo.get_result(result.id)
    assert fetched is not result and fetched.status == S.READY
    run_jobs()
    assert result.status == S.READY  # a TaskResult is a snapshot until refreshed
    result.refresh()
    assert result.status == S.SUCCESSFUL and result.return_value == {"args": ["a"], "kwargs": {}}
    assert ct.echo.get_result(result.id).return_value == result.return_value


def test_async_variants_enqueue_get_and_refresh():
    result = async_to_sync(ct.async_add.aenqueue)(2, 40)
    assert async_to_sync(ct.async_add.aget_result)(result.id).status == S.READY
    run_jobs()
    async_to_sync(result.arefresh)()
    assert (result.status, result.return_value) == (S.SUCCESSFUL, 42)
    fetched = async_to_sync(default_task_backend.aget_result)(result.id)
    assert fetched.return_value == 42


def test_an_async_task_function_runs_with_a_sync_enqueue():
    assert done(ct.async_add.enqueue(1, 2)).return_value == 3


def test_get_result_of_an_unknown_id_or_of_another_task():
    with pytest.raises(TaskResultDoesNotExist):
        ct.echo.get_result("123456789")
    result = ct.echo.enqueue()
    with pytest.raises(TaskResultMismatch):
        ct.async_add.get_result(result.id)


# --- failures ----------------------------------------------------------------------------------


def test_a_failed_result_has_its_errors_and_no_return_value():
    result = done(ct.refuse.enqueue("bad input"))
    assert result.status == S.FAILED and result.is_finished
    [error] = result.errors
    assert error.exception_class_path == "tests.integration.tasks.conformance_tasks.Refused"
    assert error.exception_class is ct.Refused
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "raise Refused(message)" in error.traceback
    assert error.traceback.rstrip().endswith("Refused: bad input")
    assert result.enqueued_at <= result.started_at <= result.finished_at
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


def test_a_return_value_that_is_not_json_fails_with_type_error():
    result = done(ct.returns_set.enqueue())
    assert result.status == S.FAILED
    assert [e.exception_class for e in result.errors] == [TypeError]


# --- the status as it moves: READY -> RUNNING -> SUCCESSFUL, seen by a real worker -----------


@pytest.mark.django_db(transaction=True)
def test_status_moves_from_ready_to_running_to_successful_under_a_real_worker():
    ct.gate.clear()
    result = ct.wait_for_gate.enqueue()
    assert result.status == S.READY
    worker = threading.Thread(target=run_worker, kwargs={"concurrency": 1})
    worker.start()
    try:
        running = eventually(
            lambda: (r := ct.wait_for_gate.get_result(result.id)).status == S.RUNNING and r,
            timeout=20,
            message="RUNNING",
        )
        assert running.started_at is not None and running.finished_at is None
        assert running.worker_ids and not running.is_finished
    finally:
        ct.gate.set()
        worker.join(timeout=30)
    result.refresh()
    assert (result.status, result.return_value) == (S.SUCCESSFUL, "opened")
    assert result.enqueued_at <= result.started_at <= result.finished_at


# --- priority, run_after, queues ---------------------------------------------------------------


def test_higher_priority_runs_first(signals_seen):
    low, high, mid = (ct.echo.using(priority=p).enqueue(p) for p in (-100, 100, 0))
    run_jobs()
    started = [s[3] for s in signals_seen if s[0] == "started"]
    assert started == [high.id, mid.id, low.id]
    assert ct.low_priority.priority == -5 and ct.echo.using(priority=7).priority == 7


@pytest.mark.parametrize("priority", [101, -101, 1.5])
def test_a_priority_out_of_range_is_invalid(priority):
    with pytest.raises(InvalidTask):
        ct.echo.using(priority=priority)


def test_run_after_an_aware_datetime_defers_the_task():
    later = timezone.now() + timedelta(minutes=10)
    result = ct.echo.using(run_after=later).enqueue("later")
    assert result.task.run_after == later
    assert run_jobs() == [] and ct.echo.get_result(result.id).status == S.READY
    run_jobs(now=later + timedelta(seconds=1))
    result.refresh()
    assert result.status == S.SUCCESSFUL and result.started_at is not None


def test_run_after_a_timedelta_is_relative_to_now():
    before = timezone.now()
    task_ = ct.echo.using(run_after=timedelta(minutes=5))
    assert before + timedelta(minutes=5) <= task_.run_after <= timezone.now() + timedelta(minutes=5)
    result = task_.enqueue()
    assert run_jobs() == [] and ct.echo.get_result(result.id).task.run_after == task_.run_after


def test_run_after_must_be_aware():
    with pytest.raises(InvalidTask, match="aware"):
        ct.echo.using(run_after=timezone.now().replace(tzinfo=None))


def test_the_queue_name_is_kept_and_an_unknown_queue_is_refused():
    result = done(ct.on_emails.enqueue())
    assert result.task.queue_name == "emails" == Job.objects.get(pk=int(result.id)).queue
    assert ct.echo.using(queue_name="emails").enqueue().task.queue_name == "emails"
    with pytest.raises(InvalidTask, match="not valid"):
        ct.echo.using(queue_name="reports")  # not in TASKS["default"]["QUEUES"]
    with pytest.raises(InvalidTask):
        task(queue_name="reports")(ct.echo.func)


# --- validation of tasks and arguments ---------------------------------------------------------


def test_a_task_takes_context_only_with_a_first_argument_named_context():
    with pytest.raises(InvalidTask, match="context"):
        task(takes_context=True)(ct.echo.func)


def test_a_task_function_must_be_defined_at_module_level():
    def local():
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task()(local)


@pytest.mark.parametrize("bad", [object(), {1, 2}, timezone.now()])
def test_arguments_that_are_not_json_are_refused_at_enqueue(bad):
    with pytest.raises(TypeError):
        ct.echo.enqueue(bad)
    with pytest.raises(TypeError):
        ct.echo.enqueue(key=bad)
    assert not Job.objects.exists()


def test_run_after_cannot_be_given_to_the_decorator():
    with pytest.raises(TypeError, match="run_after"):
        task(run_after=timezone.now())(ct.echo.func)


# --- task context --------------------------------------------------------------------------------


def test_the_context_carries_the_attempt_and_the_running_result():
    result = done(ct.context_probe.enqueue(1))
    assert result.return_value == {
        "attempt": 1,
        "id": result.id,
        "status": "RUNNING",
        "attempts": 1,
    }


def test_the_context_attempt_counts_from_one_across_retries():
    result = ct.context_probe.enqueue(3)  # fails attempts 1 and 2 (backoff 0)
    run_jobs(now=timezone.now() + timedelta(seconds=1))
    result.refresh()
    assert result.status == S.SUCCESSFUL and result.return_value["attempt"] == 3
    assert result.attempts == 3 and len(result.errors) == 2


# --- signals -------------------------------------------------------------------------------------


def test_signals_of_a_successful_task(signals_seen):
    result = done(ct.echo.enqueue())
    assert signals_seen == [
        ("enqueued", PgJobsBackend, S.READY, result.id, None),
        ("started", PgJobsBackend, S.RUNNING, result.id, None),
        ("finished", PgJobsBackend, S.SUCCESSFUL, result.id, None),
    ]


def test_signals_of_a_failed_task_send_finished_in_its_exception(signals_seen):
    result = done(ct.refuse.enqueue("no"))
    assert [s[:4] for s in signals_seen] == [
        ("enqueued", PgJobsBackend, S.READY, result.id),
        ("started", PgJobsBackend, S.RUNNING, result.id),
        ("finished", PgJobsBackend, S.FAILED, result.id),
    ]
    assert isinstance(signals_seen[-1][4], ct.Refused)


def test_task_finished_is_logged_with_the_traceback_of_a_failure(caplog):
    result = done(ct.refuse.enqueue("logged"))
    [record] = [
        r for r in caplog.records if r.name == tasks_api.MODULE and "state=FAILED" in r.getMessage()
    ]
    assert result.id in record.getMessage() and record.exc_info[0] is ct.Refused


def test_task_enqueued_is_sent_in_the_callers_transaction(signals_seen):
    with pytest.raises(RuntimeError), transaction.atomic():
        result = ct.echo.enqueue()
        assert signals_seen[0][:2] == ("enqueued", PgJobsBackend)
        raise RuntimeError("rolled back")
    with pytest.raises(TaskResultDoesNotExist):
        ct.echo.get_result(result.id)
    assert run_jobs() == []


# --- differences kept on purpose (docs/tasks.md) -------------------------------------------------


def test_difference_a_failed_task_is_retried_before_it_is_failed(signals_seen):
    result = ct.always_refuse.enqueue("again")
    run_jobs()
    result.refresh()
    assert (result.status, result.attempts) == (S.READY, 1)  # waiting for its retry
    for _ in range(conf.get("MAX_ATTEMPTS")):
        run_jobs(now=timezone.now() + timedelta(days=1))
    result.refresh()
    assert (result.status, result.attempts) == (S.FAILED, conf.get("MAX_ATTEMPTS"))
    assert len(result.errors) == conf.get("MAX_ATTEMPTS")
    finished = [s[2] for s in signals_seen if s[0] == "finished"]
    assert finished == [S.READY] * (conf.get("MAX_ATTEMPTS") - 1) + [S.FAILED]


def test_difference_max_attempts_one_fails_at_the_first_error():
    result = done(ct.refuse.enqueue("once"))
    assert (result.status, result.attempts) == (S.FAILED, 1)


def test_difference_a_task_path_read_from_the_database_is_never_imported():
    job = enqueue("test.noop")
    sql(
        "UPDATE pgjobs_job SET type = 'task:tests.integration.tasks.conformance_tasks.not_a_task', "
        'config = \'{"args": [], "kwargs": {}}\' WHERE id = %s',
        [job.id],
    )
    with pytest.raises(TaskResultDoesNotExist, match="not registered"):
        default_task_backend.get_result(str(job.id))
    assert run_jobs() == [] and ct.CALLS == []  # never claimed: no worker knows the type
