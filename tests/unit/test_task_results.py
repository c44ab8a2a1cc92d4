"""The Django Tasks bridge without a database: status mapping, attempts and errors read from a
job row, Django's own validation semantics, and a backend that never touches the database."""

import re
from datetime import datetime, timedelta, timezone

import pytest

from django_pgjobs import tasks_registry
from django_pgjobs.backend import PgJobsBackend, PgJobsTask
from django_pgjobs.exceptions import InvalidJobConfig
from django_pgjobs.models import Job
from django_pgjobs.status import JobStatus
from django_pgjobs.task_results import STATUS_MAP, attempts_of, errors_of, parse_error, task_result
from django_pgjobs.tasks_api import InvalidTask, TaskResultStatus, task, task_backends
from tests.testapp import tasks as t

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def entry(worker, outcome, error=None, minute=0):
    return {
        "attempt": 1,
        "worker": worker,
        "outcome": outcome,
        "error": error,
        "started_at": (T0 + timedelta(minutes=minute)).isoformat(),
    }


def job_row(**fields):
    defaults = dict(
        id=7,
        type="task:tests.testapp.tasks.add",
        queue="default",
        priority=0,
        status=JobStatus.PENDING,
        config={"args": [1, 2], "kwargs": {}, "backend": "default"},
        result={},
        history=[],
        attempts=0,
        created_at=T0,
    )
    defaults.update(fields)
    return Job(**defaults)


# --- status mapping ----------------------------------------------------------------------------


def test_every_job_status_maps_to_a_django_status():
    missing = set(JobStatus.values) - set(STATUS_MAP)
    assert not missing, (
        f"JobStatus {sorted(missing)} has no Django Tasks status: add it to STATUS_MAP in "
        "django_pgjobs/task_results.py and to the mapping table in the README"
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (JobStatus.PENDING, TaskResultStatus.READY),
        (JobStatus.RUNNING, TaskResultStatus.RUNNING),
        (JobStatus.COMPLETED, TaskResultStatus.SUCCESSFUL),
        (JobStatus.COMPLETED_WITH_ERRORS, TaskResultStatus.SUCCESSFUL),
        (JobStatus.FAILED, TaskResultStatus.FAILED),
        (JobStatus.CANCELLED, TaskResultStatus.FAILED),
    ],
)
def test_status_mapping(status, expected):
    result = task_result(
        t.add, job_row(status=status, attempts=1, locked_by="w1", result={"return_value": 3})
    )
    assert result.status == expected
    assert result.is_finished == (expected in ("SUCCESSFUL", "FAILED"))


# --- attempts, worker ids, errors --------------------------------------------------------------


def test_retried_then_running_counts_every_attempt_and_names_its_workers():
    job = job_row(
        status=JobStatus.RUNNING,
        attempts=3,
        locked_by="w3",
        started_at=T0 + timedelta(minutes=5),
        history=[
            entry("w1", "retry", "builtins.ValueError\nTraceback...\nValueError: 1"),
            entry("w2", "lease_expired", "lease expired", minute=2),
        ],
    )
    result = task_result(t.add, job)
    assert result.worker_ids == ["w1", "w2", "w3"]
    assert result.attempts == 3
    assert result.started_at == T0 and result.last_attempted_at == T0 + timedelta(minutes=5)
    assert [e.exception_class_path for e in result.errors] == [
        "builtins.ValueError",
        "django_pgjobs.exceptions.LeaseLost",
    ]
    assert result.errors[0].exception_class is ValueError
    assert result.finished_at is None


def test_released_attempts_are_refunded_and_manual_retry_starts_over():
    job = job_row(
        status=JobStatus.PENDING,
        attempts=1,
        locked_by="w3",
        history=[
            entry("w1", "attempts_exhausted", "builtins.KeyError\ntb"),
            {"outcome": "manual_retry", "previous_status": "FAILED", "attempt": 1},
            entry("w2", "released", "released unstarted at worker shutdown"),
            entry("w3", "retry", "builtins.OSError\ntb"),
        ],
    )
    attempts = attempts_of(job)
    assert [a.worker for a in attempts] == ["w3"]
    assert [e.exception_class_path for e in errors_of(job, attempts)] == ["builtins.OSError"]


def test_the_last_error_is_read_in_full_from_the_row():
    long_tb = "Traceback (most recent call last):\n" + "x" * 5000
    job = job_row(
        status=JobStatus.FAILED,
        attempts=1,
        locked_by="w1",
        error="tests.testapp.tasks.TaskBoom\n" + long_tb,
        history=[
            entry("w1", "attempts_exhausted", ("tests.testapp.tasks.TaskBoom\n" + long_tb)[:2000])
        ],
        finished_at=T0,
    )
    result = task_result(t.boom, job)
    assert result.errors[0].traceback == long_tb
    assert result.errors[0].exception_class is t.TaskBoom
    assert result.finished_at == T0


def test_error_text_without_a_class_path_is_kept_whole():
    error = parse_error("something odd")
    assert error.exception_class_path == "django_pgjobs.exceptions.PgJobsError"
    assert error.traceback == "something odd"


def test_return_value_only_when_successful():
    done = task_result(
        t.add,
        job_row(
            status=JobStatus.COMPLETED, attempts=1, locked_by="w", result={"return_value": None}
        ),
    )
    assert done.return_value is None
    failed = task_result(t.add, job_row(status=JobStatus.FAILED, attempts=1, locked_by="w"))
    with pytest.raises(ValueError, match="Task failed"):
        failed.return_value  # noqa: B018


# --- Django's validation semantics: the same exceptions as the built-in backends --------------


def module_level(x):
    return x


async def async_module_level(x):
    return x


def make(backend, func=module_level, **options):
    return task(backend=backend, **options)(func)


@pytest.fixture(autouse=True)
def _forget_tasks_defined_here():
    """Tasks this module defines on its own functions are not left in the registry."""
    yield
    for name in [n for n in tasks_registry._tasks if n.startswith(f"task:{__name__}.")]:
        tasks_registry.unregister_task(tasks_registry._tasks[name])


@pytest.fixture
def ours():
    def factory(**options):
        return make("default", **options)

    return factory


def raised(fn):
    """(type, message) of what fn() raises; a message that names the task class (the
    backport's) names it Task(), whichever subclass the backend uses."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return type(exc), re.sub(r"^[\w.]+\(\) got ", "Task() got ", str(exc))
    return None, None


@pytest.mark.parametrize("reference", ["dummy", "immediate"])
@pytest.mark.parametrize(
    ("case", "build"),
    [
        ("priority too high", lambda b: make(b, priority=101)),
        ("priority not whole", lambda b: make(b, priority=1.5)),
        ("unknown queue", lambda b: make(b).using(queue_name="nope")),
        ("nested function", lambda b: make(b, func=(lambda: None))),
        ("takes_context without context", lambda b: make(b, takes_context=True)),
        ("run_after in decorator", lambda b: make(b, run_after=T0)),
    ],
)
def test_validation_matches_the_builtin_backends(reference, case, build):
    expected = raised(lambda: build(reference))
    assert expected[0] is not None, case
    assert raised(lambda: build("default")) == expected


def test_naive_run_after_is_refused_like_the_dummy_backend(settings):
    naive = datetime(2030, 1, 1, 12, 0)
    expected = raised(lambda: make("dummy").using(run_after=naive))
    assert expected == (InvalidTask, "run_after must be an aware datetime.")
    assert raised(lambda: make("default").using(run_after=naive)) == expected


@pytest.mark.parametrize("bad", [object(), {1, 2}, b"\xff"])
def test_non_json_arguments_raise_what_the_builtin_backends_raise(ours, bad):
    expected = raised(lambda: make("dummy").enqueue(bad))
    assert expected[0] in (TypeError, ValueError)
    assert raised(lambda: ours().enqueue(bad)) == expected  # refused before any query


def test_stricter_than_django_nan_is_refused_before_any_query(ours):
    with pytest.raises(InvalidJobConfig, match="NaN"):
        ours().enqueue(float("nan"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be a whole number >= 1"),
        ({"timeout": -1}, "timeout must be a number of seconds > 0"),
        ({"backoff": 5}, "backoff must be a callable"),
        ({"unique_key": ""}, "unique_key must be a non-empty string"),
    ],
)
def test_extra_options_are_validated_at_decoration(ours, options, message):
    with pytest.raises(InvalidTask, match=message):
        ours(**options)


def test_extra_options_reach_the_worker_handler_spec(ours):
    def backoff(attempt):
        return attempt * 2.0

    created = ours(max_attempts=7, backoff=backoff, timeout=12.5, queue_name="emails", priority=-3)
    assert isinstance(created, PgJobsTask)
    spec = tasks_registry.registry.get("task:tests.unit.test_task_results.module_level")
    assert (spec.max_attempts, spec.backoff, spec.timeout, spec.queue, spec.priority) == (
        7,
        backoff,
        12.5,
        "emails",
        -3,
    )


def test_async_tasks_are_supported(ours):
    created = ours(func=async_module_level)
    assert tasks_registry.job_type(created) == f"task:{__name__}.async_module_level"


# --- the backend never touches the database ----------------------------------------------------
# (no django_db mark: pytest-django fails any query made in these tests)


def test_backend_construction_and_task_definition_make_no_query():
    backend = PgJobsBackend("other", {"QUEUES": ["default"]})
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task
    assert isinstance(task_backends["default"], PgJobsBackend)
    assert t.add.using(priority=5).priority == 5


def test_check_reports_queue_names_the_queue_cannot_hold():
    backend = PgJobsBackend("default", {"QUEUES": ["default", "bad queue!"]})
    assert [m.id for m in backend.check()] == ["pgjobs.E202"]


def test_check_reports_a_backend_without_the_app_installed(settings):
    settings.INSTALLED_APPS = ["django.contrib.contenttypes"]
    assert [m.id for m in PgJobsBackend("default", {}).check()] == ["pgjobs.E201"]
