"""django-pgjobs as the backend of Django's Tasks framework (``django.tasks``).

::

    TASKS = {"default": {"BACKEND": "django_pgjobs.backend.PgJobsBackend",
                         "QUEUES": ["default", "emails"]}}

A ``@task`` call is a job of type ``task:<module>.<function>`` whose config is
``{"args": [...], "kwargs": {...}, "backend": alias}``, written in the caller's transaction and run
by ``manage.py runjobs`` with the same leases, retries and signals as a ``@handler``. The result id
is the job id (as a string). Extra ``@task`` options: ``max_attempts``, ``backoff``,
``backoff_base``, ``backoff_max``, ``timeout``, ``unique_key``, ``unique_for``, ``debounce``,
``debounce_key`` and ``debounce_max_wait`` (see :class:`PgJobsTask`).

Constructing the backend never touches the database: Django builds one per thread, and at import
time of every ``@task`` module.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

from django.apps import apps
from django.core import checks
from django.utils import timezone

from . import conf, tasks_registry
from .enqueue import enqueue as enqueue_job
from .exceptions import InvalidJobOption
from .task_results import task_result
from .tasks_api import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from .validation import check_flow, check_queue
from .workflows import JobSpec

UniqueKey = str | Callable[..., str]
_MAX_TYPE_LENGTH = 255


@dataclass(frozen=True, slots=True, kw_only=True)
class PgJobsTask(Task):
    """Django's ``Task`` with django-pgjobs' per-task options, given to ``@task(...)``.

    - ``max_attempts``: runs before the task ends FAILED (default ``PGJOBS['MAX_ATTEMPTS']``).
    - ``backoff`` (``attempt -> seconds``) or ``backoff_base``/``backoff_max`` (exponential):
      the wait before the next attempt.
    - ``timeout``: seconds an attempt may run before it counts as failed.
    - ``unique_key``: a string, or a callable receiving the task's arguments and returning one.
      While a job of this task with that key is pending or running, ``enqueue()`` returns its
      result instead of adding another. ``.using(unique_key=...)`` sets it per call.
    - ``unique_for`` (a timedelta or seconds): the key also stays taken that long after the
      enqueue, once the job finished or was pruned (docs/flow-control.md).
    - ``debounce`` with ``debounce_key`` (a string, or a callable of the task's arguments) and
      optionally ``debounce_max_wait``: calls of the same key within ``debounce`` merge into one
      run with the last call's arguments.
    Each can be given to ``@task(...)`` or per call with ``.using(...)``.
    """

    max_attempts: int | None = None
    backoff: Callable[[int], float] | None = None
    backoff_base: float | None = None
    backoff_max: float | None = None
    timeout: float | None = None
    unique_key: UniqueKey | None = None
    unique_for: timedelta | float | None = None
    debounce: timedelta | float | None = None
    debounce_key: UniqueKey | None = None
    debounce_max_wait: timedelta | float | None = None

    def __post_init__(self) -> None:
        Task.__post_init__(self)  # validates (zero-argument super() fails in slotted dataclasses)
        if isinstance(self.get_backend(), PgJobsBackend):
            tasks_registry.register_task(self)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: Any = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        unique_key: UniqueKey | None = None,
        unique_for: timedelta | float | None = None,
        debounce: timedelta | float | None = None,
        debounce_key: UniqueKey | None = None,
        debounce_max_wait: timedelta | float | None = None,
    ) -> PgJobsTask:
        if isinstance(run_after, timedelta):  # documented by Django: relative to now
            run_after = timezone.now() + run_after
        task = cast(
            "PgJobsTask",
            Task.using(
                self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
            ),
        )
        extra: dict[str, Any] = {
            "max_attempts": max_attempts,
            "unique_key": unique_key,
            "unique_for": unique_for,
            "debounce": debounce,
            "debounce_key": debounce_key,
            "debounce_max_wait": debounce_max_wait,
        }
        changes = {k: v for k, v in extra.items() if v is not None}
        return replace(task, **changes) if changes else task

    def step(self, *args: Any, **kwargs: Any) -> JobSpec:
        """This task with these arguments as a workflow step (``chain(a.step(1), b.step())``,
        ``Workflow.add_spec``); in a chain() it also gets the previous step's return value as
        its first argument, as in Celery. Checked as ``enqueue()`` checks; a unique key or a
        debounce is refused (a workflow's job is never skipped or merged)."""
        backend = self.get_backend()
        if not isinstance(backend, PgJobsBackend):
            raise InvalidTask(f"{self.module_path}: step() needs the PgJobsBackend")
        backend.validate_task(self)
        _check_importable(self)
        if self.unique_key is not None or self.debounce is not None:
            raise InvalidTask(
                f"{self.module_path}: a workflow step cannot have a unique_key or a debounce"
            )
        json_args = cast("list[Any]", normalize_json(list(args)))
        json_kwargs = cast("dict[str, Any]", normalize_json(dict(kwargs)))
        options = {"queue": self.queue_name, "priority": self.priority}
        if self.max_attempts is not None:
            options["max_attempts"] = self.max_attempts
        if self.run_after is not None:
            options["run_after"] = self.run_after
        name = tasks_registry.register_task(self)
        return JobSpec(name, backend._config(self, json_args, json_kwargs), options)


class PgJobsBackend(BaseTaskBackend):
    task_class = PgJobsTask

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    # --- validation: Django's rules, then ours ---------------------------------------------------

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        try:
            check_queue(task.queue_name)
        except InvalidJobOption as exc:
            raise InvalidTask(str(exc)) from None
        if len(tasks_registry.job_type(task)) > _MAX_TYPE_LENGTH:
            raise InvalidTask(
                f"task path {task.module_path!r} is too long: its job type must fit in "
                f"{_MAX_TYPE_LENGTH} characters"
            )
        _validate_options(task)

    # --- enqueue -------------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Iterable[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Write the job in the caller's transaction (rolled back with it; runnable on commit)."""
        self.validate_task(task)
        _check_importable(task)
        json_args = cast("list[Any]", normalize_json(list(args)))
        json_kwargs = cast("dict[str, Any]", normalize_json(dict(kwargs)))
        name = tasks_registry.register_task(task)
        job = enqueue_job(
            name,
            self._config(task, json_args, json_kwargs),
            queue=task.queue_name,
            priority=task.priority,
            run_after=task.run_after,
            max_attempts=getattr(task, "max_attempts", None),
            unique_key=_key(task, "unique_key", name, json_args, json_kwargs),
            unique_for=getattr(task, "unique_for", None),
            debounce=getattr(task, "debounce", None),
            debounce_key=_key(task, "debounce_key", None, json_args, json_kwargs),
            debounce_max_wait=getattr(task, "debounce_max_wait", None),
        )
        if getattr(job, "holder_pruned", False):
            raise TaskResultDoesNotExist(
                f"{job.id}: this task's unique_key is held by a job since pruned (its window "
                "is still open); enqueue() returned no new result"
            )
        if getattr(job, "deduplicated", False):
            result = tasks_registry.result_for_job(job)
            if result is not None:
                return result
        result = task_result(task, job)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _config(self, task: Task, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        config: dict[str, Any] = {"args": args, "kwargs": kwargs, "backend": self.alias}
        if task.run_after is not None:
            config["run_after"] = task.run_after.isoformat()
        return config

    # --- results -------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        from .models import Job

        job_id = _job_id(result_id)
        try:
            job = Job.objects.using(conf.get("DATABASE")).get(
                pk=job_id, type__startswith=tasks_registry.TYPE_PREFIX
            )
        except Job.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None
        result = tasks_registry.result_for_job(job)
        if result is None:
            raise TaskResultDoesNotExist(
                f"{result_id}: its task {job.type.removeprefix(tasks_registry.TYPE_PREFIX)!r} "
                "is not registered in this process (is its module autodiscovered?)"
            )
        return result

    # --- system checks -------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return [*super().check(**kwargs), *self._own_checks()]

    def _own_checks(self) -> Iterable[checks.CheckMessage]:
        if not apps.is_installed("django_pgjobs"):
            yield checks.Error(
                f"TASKS[{self.alias!r}] uses PgJobsBackend but django_pgjobs is not installed",
                hint="Add 'django_pgjobs' to INSTALLED_APPS and run migrate.",
                id="pgjobs.E201",
            )
        for name in sorted(self.queues):
            try:
                check_queue(name)
            except InvalidJobOption as exc:
                yield checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES']: {exc}",
                    id="pgjobs.E202",
                    hint="Queue names are 1-63 characters among letters, digits and '_.:-'.",
                )


def _job_id(result_id: Any) -> int:
    """A result id is a job id; anything else (even a number PostgreSQL cannot hold) is unknown."""
    try:
        job_id = int(str(result_id).strip())
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None
    if not 0 < job_id < 2**63:
        raise TaskResultDoesNotExist(result_id)
    return job_id


def _check_importable(task: Task) -> None:
    """A task whose module does not hold it (defined in a shell, or in a script run as
    ``__main__``) can never be found by a worker: refused, as enqueue() refuses unknown types."""
    module = sys.modules.get(task.func.__module__ or "")
    found: Any = module
    for part in task.func.__qualname__.split("."):
        found = getattr(found, part, None)
    if (
        module is not None
        and task.func.__module__ not in ("__main__", "__mp_main__")
        and (found is task.func or getattr(found, "func", None) is task.func)
    ):
        return
    raise InvalidTask(
        f"task {task.func.__qualname__} is defined in {task.func.__module__ or 'no module'!r} "
        "(a shell, or a script run as __main__), where no worker can import it: its jobs would "
        "wait forever. Define it in a tasks.py module of an installed app"
    )


def _validate_options(task: Task) -> None:
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise InvalidTask(f"max_attempts must be a whole number >= 1, got {max_attempts!r}")
    for name in ("timeout", "backoff_base", "backoff_max"):
        value = getattr(task, name, None)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0
        ):
            raise InvalidTask(f"{name} must be a number of seconds > 0, got {value!r}")
    backoff = getattr(task, "backoff", None)
    if backoff is not None and not callable(backoff):
        raise InvalidTask(f"backoff must be a callable attempt -> seconds, got {backoff!r}")
    for option in ("unique_key", "debounce_key"):
        key = getattr(task, option, None)
        if key is not None and not callable(key) and not (isinstance(key, str) and key):
            raise InvalidTask(f"{option} must be a non-empty string or a callable, got {key!r}")
    _validate_flow(task)


def _validate_flow(task: Task) -> None:
    """unique_for / debounce: enqueue()'s rules (validation.check_flow), as InvalidTask."""
    try:
        check_flow(
            unique_key=getattr(task, "unique_key", None),
            unique_for=getattr(task, "unique_for", None),
            debounce=getattr(task, "debounce", None),
            debounce_key=getattr(task, "debounce_key", None),
            debounce_max_wait=getattr(task, "debounce_max_wait", None),
            run_after=task.run_after,
        )
    except InvalidJobOption as exc:
        raise InvalidTask(str(exc)) from None


def _key(
    task: Task, option: str, name: str | None, args: list[Any], kwargs: dict[str, Any]
) -> str | None:
    """A unique or debounce key: a string, or the callable's answer for these arguments.
    A unique key is namespaced by task (``name``): two tasks never share one; a debounce key
    already is, by its job type."""
    key = getattr(task, option, None)
    if key is None:
        return None
    if callable(key):
        key = key(*args, **kwargs)
    if not isinstance(key, str) or not key:
        raise InvalidTask(
            f"{option} of {task.module_path} must give a non-empty string, got {key!r}"
        )
    return f"{name}|{key}" if name else key
