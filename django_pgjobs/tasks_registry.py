"""A Django ``@task`` is a job type: ``task:<module>.<function>``.

Registration: a task defined with ``@task`` while ``PgJobsBackend`` is its backend registers
itself here when it is created, i.e. when its module is imported. Every process imports the
``tasks`` modules of the installed apps at startup (``PGJOBS['AUTODISCOVER_MODULES']``), so the
web process and ``runjobs`` know the same tasks. The worker then dispatches a job only through
this table: the task path stored in the database is looked up, never imported.

Running: the job's handler (:func:`run_task_job`) rebuilds the ``TaskResult`` from the row, sends
``task_started``, calls the function (sync or async, with a ``TaskContext`` if it takes one) and
returns ``{"return_value": ...}``. Errors, retries, timeouts and leases are the worker's, exactly
as for a ``@handler``. ``task_finished`` is sent after the worker recorded the outcome (never
for a run whose lease was lost); for a failed attempt, inside the handling of its exception.
"""

from __future__ import annotations

import inspect
import itertools
import json
import threading
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.dispatch import receiver
from django.utils.dateparse import parse_datetime

from . import conf, registry, signals
from .context import JobContext
from .exceptions import Fail, JobTimeout, PgJobsError
from .registry import HandlerSpec
from .task_results import STATUS_MAP, error_text, parse_error, set_return_value, task_result, update
from .tasks_api import (
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)

if TYPE_CHECKING:
    from .models import Job
    from .queries import Completion

TYPE_PREFIX = "task:"

_tasks: dict[str, Task] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True, kw_only=True)
class PgJobsTaskContext(TaskContext):  # type: ignore[misc]  # frozen in Django, not in the stubs
    """Django's ``TaskContext``, plus the running job (``context.job.cancel_requested`` …)."""

    job: JobContext

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the task got: ``job.progress()`` (read back as ``result.progress``)."""
        self.job.progress(done, total, note)


def job_type(task: Task) -> str:
    return TYPE_PREFIX + task.module_path


def register_task(task: Task) -> str:
    """Make ``task`` runnable by the worker; returns its job type. Idempotent.

    The first task object seen for a path wins (the ``@task`` definition: ``.using()`` copies
    come later); a re-import of the same module replaces it.
    """
    name = job_type(task)
    with _lock:
        known = _tasks.get(name)
        if known is not None and known.func is task.func and registry.get(name) is not None:
            return name
        registry.register(_spec(name, task))
        _tasks[name] = task
    return name


def _spec(name: str, task: Task) -> HandlerSpec:
    def run(job: JobContext) -> dict[str, Any]:
        return run_task_job(job)

    async def arun(job: JobContext) -> dict[str, Any]:  # on the worker's event loop (aio.py)
        return await arun_task_job(job)

    func = arun if inspect.iscoroutinefunction(task.func) else run
    func.__qualname__ = func.__name__ = f"run[{task.module_path}]"
    return HandlerSpec(
        type=name,
        func=func,
        queue=task.queue_name,
        priority=task.priority,
        max_attempts=getattr(task, "max_attempts", None),
        backoff_base=getattr(task, "backoff_base", None),
        backoff_max=getattr(task, "backoff_max", None),
        backoff=getattr(task, "backoff", None),
        timeout=getattr(task, "timeout", None),
        format_error=task_error_text,
    )


def get_task(name: str) -> Task | None:
    """The task registered in this process for a job type (None: unknown here)."""
    return _tasks.get(name)


def unregister_task(task: Task) -> None:
    """Forget a task (for tests)."""
    name = job_type(task)
    with _lock:
        _tasks.pop(name, None)
        registry.unregister(name)


def task_error_text(exc: BaseException) -> str:
    """The job's ``error`` for an exception a task raised: class path first, then traceback."""
    from .worker.executor import format_error

    if isinstance(exc, Unstorable):
        exc = exc.error
    return error_text(_class_path(exc), format_error(exc))


# --- a job row as a TaskResult -----------------------------------------------------------------


def as_enqueued(task: Task, job: Job) -> Task:
    """The registered task with the options the job was enqueued with."""
    config = job.config or {}
    run_after = config.get("run_after")
    changes: dict[str, Any] = {
        "priority": job.priority,
        "queue_name": job.queue,
        "backend": config.get("backend", task.backend),
        "run_after": parse_datetime(run_after) if isinstance(run_after, str) else None,
    }
    if all(getattr(task, k) == v for k, v in changes.items()):
        return task
    try:
        return replace(task, **changes)
    except (InvalidTask, InvalidTaskBackend):  # e.g. a queue since removed from QUEUES
        return task


def result_for_job(job: Job) -> TaskResult | None:
    """The TaskResult of a task job row; None when no task of this process matches it."""
    task = get_task(job.type)
    if task is None:
        return None
    return task_result(as_enqueued(task, job), job)


# --- running -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Run:
    """A run in progress in this process, until task_finished: its result, what it raised."""

    result: TaskResult
    exc: BaseException | None = None


_running: dict[tuple[int, Any], _Run] = {}  # {(job id, lease): run}


def run_task_job(job: JobContext) -> dict[str, Any]:
    """The handler of every task job: load, announce, call, return ``{"return_value": …}``."""
    result = _load_result(job)
    run = _running[(job.id, job.lease_text)] = _Run(result)
    try:
        return _call(result, job)
    except BaseException as exc:  # kept for task_finished's exception context, then re-raised
        run.exc = exc.error if isinstance(exc, Unstorable) else exc
        raise


async def arun_task_job(job: JobContext) -> dict[str, Any]:
    """run_task_job for an ``async def`` task, on the worker's event loop: the row is read
    through sync_to_async, the function awaited."""
    result = await sync_to_async(_load_result)(job)
    run = _running[(job.id, job.lease_text)] = _Run(result)
    task = result.task
    try:
        task_started.send(sender=type(task.get_backend()), task_result=result)
        args = (PgJobsTaskContext(task_result=result, job=job),) if task.takes_context else ()
        value = await task.acall(*args, *result.args, **result.kwargs)
        return {"return_value": _json_return_value(task, value)}
    except BaseException as exc:  # kept for task_finished's exception context, then re-raised
        run.exc = exc.error if isinstance(exc, Unstorable) else exc
        raise


def _call(result: TaskResult, job: JobContext) -> dict[str, Any]:
    task = result.task
    task_started.send(sender=type(task.get_backend()), task_result=result)
    if task.takes_context:
        value = task.call(
            PgJobsTaskContext(task_result=result, job=job), *result.args, **result.kwargs
        )
    else:
        value = task.call(*result.args, **result.kwargs)
    return {"return_value": _json_return_value(task, value)}


def _load_result(job: JobContext) -> TaskResult:
    from .models import Job

    row = Job.objects.using(conf.get("DATABASE")).get(pk=job.id)
    result = result_for_job(row)
    if result is None:  # the claim only takes registered types: this cannot happen
        raise Fail(f"job type {job.type!r} is not a task registered in this process")
    if (row.config or {}).get("pipe"):  # a chain's step: the previous return value first
        update(result, args=[_previous_return_value(job), *result.args])
    return result


def _previous_return_value(job: JobContext) -> Any:
    """What the one dependency of ``job`` returned: a task's return value, a handler's result."""
    found = list(itertools.islice(job.upstream_results(), 2))
    if len(found) != 1:
        raise Fail(f"job {job.id}: a chain step has one dependency, found {len(found)}")
    value = found[0]
    if isinstance(value, dict) and set(value) == {"return_value"}:
        return value["return_value"]
    return value


class Unstorable(Fail):
    """Fails the task at once (no retry), recording ``error``: the exception that made its
    return value unstorable (TypeError, ValueError…), as Django's own backends record it."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _json_return_value(task: Task, value: Any) -> Any:
    """The return value as stored; a value that cannot be stored fails the task (no retry)."""
    try:
        value = normalize_json(value)
        size = len(json.dumps(value, allow_nan=False, ensure_ascii=False).encode())
    except (TypeError, ValueError, RecursionError) as exc:
        exc.args = (f"{task.module_path} returned a value that is not JSON: {exc}",)
        raise Unstorable(exc) from None
    limit = conf.get("MAX_RESULT_BYTES")
    if size > limit:
        raise Fail(
            f"{task.module_path} returned {size:,} bytes of JSON, over the {limit:,}-byte limit "
            "(PGJOBS['MAX_RESULT_BYTES']); store large results elsewhere and return a reference"
        )
    return value


@receiver(signals.job_finished, dispatch_uid="django_pgjobs.tasks_registry.finished")
def _send_task_finished(
    sender: str, job: JobContext, completion: Completion, applied: bool, **kwargs: Any
) -> None:
    """After the worker recorded an attempt's outcome: ``task_finished``, once per attempt.

    ``task_result.status`` is SUCCESSFUL or FAILED when the task is done, READY when a retry is
    scheduled. Nothing is sent when the lease had been lost (another worker owns the task).
    """
    run = _running.pop((job.id, job.lease_text), None)
    if run is None or not applied:
        return
    _apply(run.result, completion)
    _send_finished(run.result, _recorded_exception(run, completion))


def _send_finished(result: TaskResult, exc: BaseException | None) -> None:
    """``task_finished``; for an attempt that failed, inside the handling of its exception, as
    Django's backends send it (its log line and receivers read ``sys.exc_info()``)."""
    sender = type(result.task.get_backend())
    if exc is None:
        task_finished.send(sender=sender, task_result=result)
        return
    tb = exc.__traceback__
    try:
        raise exc
    except BaseException:
        exc.__traceback__ = tb  # the task's own traceback, without this frame (Python 3.11+)
        task_finished.send(sender=sender, task_result=result)


def _recorded_exception(run: _Run, completion: Completion) -> BaseException | None:
    """The exception of the outcome recorded: the run's own, or, when the recorded error is not
    it (a timeout, an outcome the database refused), a stand-in carrying the recorded error."""
    if not completion.error:
        return None
    recorded = parse_error(completion.error)
    exc = run.exc
    if exc is not None and recorded.exception_class_path == _class_path(exc):
        return exc
    lines = [ln for ln in recorded.traceback.splitlines() if ln.strip()]
    message = lines[-1].partition(": ")[2] if lines else ""
    cls = JobTimeout if recorded.exception_class_path == _class_path(JobTimeout()) else PgJobsError
    return cls(message or completion.error)


def _class_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def _apply(result: TaskResult, completion: Completion) -> None:
    status = STATUS_MAP[completion.status]
    changes: dict[str, Any] = {"status": status}
    if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
        started = result.last_attempted_at
        if started is not None:
            changes["finished_at"] = started + timedelta(milliseconds=completion.duration_ms)
    update(result, **changes)
    if completion.error:
        result.errors.append(parse_error(completion.error))
    if status == TaskResultStatus.SUCCESSFUL:
        set_return_value(result, (completion.result or {}).get("return_value"))
