"""A job row, seen as a Django ``TaskResult``. Pure functions of the row: no query, no clock.

Status mapping (django-pgjobs -> django.tasks)::

    PENDING                           -> READY       (new, or waiting for its next attempt)
    RUNNING                           -> RUNNING
    COMPLETED, COMPLETED_WITH_ERRORS  -> SUCCESSFUL
    FAILED, CANCELLED                 -> FAILED

Attempts are read from the row's ``history`` (one entry per attempt that did not end the job)
plus the attempt in progress or the one that ended it (``locked_by``), so that
``len(worker_ids) == job.attempts`` and ``TaskContext.attempt`` is the 1-based attempt number.
A shutdown release refunds its attempt and is not counted; a manual retry starts the count
again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime

from .status import JobStatus
from .tasks_api import Task, TaskError, TaskResult, TaskResultStatus

if TYPE_CHECKING:
    from .models import Job

STATUS_MAP: dict[str, TaskResultStatus] = {
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobStatus.COMPLETED_WITH_ERRORS: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

# History outcomes that are not attempts of the task.
_NOT_AN_ATTEMPT = {"released", "manual_retry"}
_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
LEASE_LOST_PATH = "django_pgjobs.exceptions.LeaseLost"
UNKNOWN_ERROR_PATH = "django_pgjobs.exceptions.PgJobsError"


# --- errors: what a failed @task attempt stores, and how it is read back ----------------------


def error_text(exception_class_path: str, traceback_text: str) -> str:
    """The ``error`` of a failed task attempt: the exception class path, then the traceback.

    The class path comes first so that it survives every truncation (``history`` keeps the
    first 2,000 characters of each error).
    """
    return f"{exception_class_path}\n{traceback_text}"


def parse_error(text: str) -> TaskError:
    first, _, rest = text.partition("\n")
    if rest and _CLASS_PATH.fullmatch(first):
        return TaskError(exception_class_path=first, traceback=rest)
    if text.startswith("lease expired"):  # written by the reaper: the worker died or stalled
        return TaskError(exception_class_path=LEASE_LOST_PATH, traceback=text)
    return TaskError(exception_class_path=UNKNOWN_ERROR_PATH, traceback=text)


# --- attempts ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attempt:
    worker: str
    started_at: datetime | None
    error: str | None


def attempts_of(job: Job) -> list[Attempt]:
    """Every attempt of the job's current run (since its last manual retry), oldest first."""
    past: list[Attempt] = []
    for entry in job.history or []:
        if not isinstance(entry, dict):
            continue
        outcome = entry.get("outcome")
        if outcome == "manual_retry":
            past = []
            continue
        if outcome in _NOT_AN_ATTEMPT or "worker" not in entry:
            continue
        started = entry.get("started_at")
        past.append(
            Attempt(
                worker=str(entry.get("worker") or ""),
                started_at=parse_datetime(started) if isinstance(started, str) else None,
                error=entry.get("error") or None,
            )
        )
    # The attempt in progress, or the one that ended the job, is not in the history yet.
    current = max(0, job.attempts - len(past))
    past += [Attempt(worker=job.locked_by or "", started_at=job.started_at, error=None)] * current
    return past


def errors_of(job: Job, attempts: list[Attempt]) -> list[TaskError]:
    texts = [a.error for a in attempts if a.error]
    # history keeps a prefix of each error; the row's `error` holds the last one in full.
    if texts and job.error and job.error.startswith(texts[-1]):
        texts[-1] = job.error
    return [parse_error(t) for t in texts]


# --- the TaskResult ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PgJobsTaskResult(TaskResult):  # type: ignore[misc]  # frozen in Django, not in the stubs
    """Django's ``TaskResult`` plus ``progress``: the task's last ``context.progress(...)``
    report, ``{"done", "total", "note", "at"}`` (None before any). ``refresh()`` updates it."""

    progress: dict[str, Any] | None = None

    def refresh(self) -> None:
        _refresh_from(self, self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        _refresh_from(self, await self.task.get_backend().aget_result(self.id))


def _refresh_from(result: TaskResult, fresh: TaskResult) -> None:
    for attr in (*_REFRESHED, "_return_value", "progress"):
        object.__setattr__(result, attr, getattr(fresh, attr, None))


_REFRESHED = (
    "errors",
    "finished_at",
    "started_at",
    "last_attempted_at",
    "status",
    "enqueued_at",
    "worker_ids",
)


def task_result(task: Task, job: Job) -> TaskResult:
    """The ``TaskResult`` of a task job row, for ``task`` (the task as it was enqueued)."""
    attempts = attempts_of(job)
    status = STATUS_MAP[job.status]
    config = job.config or {}
    result = PgJobsTaskResult(
        task=task,
        id=str(job.id),
        status=status,
        enqueued_at=job.created_at,
        started_at=attempts[0].started_at if attempts else None,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        finished_at=job.finished_at if status in _FINISHED else None,
        args=list(config.get("args", [])),
        kwargs=dict(config.get("kwargs", {})),
        backend=str(config.get("backend", task.backend)),
        errors=errors_of(job, attempts),
        worker_ids=[a.worker for a in attempts],
        progress=job.progress,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        set_return_value(result, (job.result or {}).get("return_value"))
    return result


_FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def set_return_value(result: TaskResult, value: Any) -> None:
    object.__setattr__(result, "_return_value", value)  # TaskResult is frozen, as Django does


def update(result: TaskResult, **changes: Any) -> None:
    """Mutate a frozen TaskResult in place (what Django's own backends do)."""
    for name, value in changes.items():
        object.__setattr__(result, name, value)
