"""The operator's actions on jobs, public: ``django_pgjobs.cancel(ids)``, ``retry_now``,
``run_now``, ``duplicate``, ``delete_finished`` (and ``cancel_workflow``). Each takes one job
id or many (ids or Job rows) and returns what it changed; a job not in a state the action
applies to is skipped and left as it is. The admin's actions call these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db import transaction

from . import conf, queries, registry

JobIds = Any  # an int, a Job, or an iterable of them


class Cancellation(NamedTuple):
    cancelled: list[int]  # were PENDING: now CANCELLED
    requested: list[int]  # are RUNNING: job.cancel_requested is true for their handler


def job_ids(ids: JobIds) -> list[int]:
    """``ids`` as a list of job ids, or TypeError naming what is not one."""
    if _one(ids) is not None:
        return [_one(ids)]  # type: ignore[list-item]
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise TypeError(f"expected a job id, a Job or an iterable of them, got {ids!r}"[:300])
    found = []
    for item in ids:
        job_id = _one(item)
        if job_id is None:
            raise TypeError(f"expected job ids (int) or Job rows, got {item!r}"[:300])
        found.append(job_id)
    return found


def _one(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    pk = getattr(value, "pk", None) if hasattr(value, "_meta") else None
    return pk if isinstance(pk, int) and not isinstance(pk, bool) else None


def cancel(ids: JobIds, *, using: str | None = None) -> Cancellation:
    """PENDING jobs end CANCELLED at once; RUNNING ones get a cancel request, which their
    handler sees as ``job.cancel_requested`` (and ends them by raising ``Cancelled``)."""
    cancelled, requested = queries.cancel(job_ids(ids), using=using)
    return Cancellation(cancelled, requested)


def cancel_workflow(workflow: Any, *, using: str | None = None) -> Cancellation:
    """Cancel every job of a workflow (its id, or what ``enqueue()`` returned) not yet
    ended: WAITING and PENDING ones at once, RUNNING ones by request; in one transaction."""
    from .sql import workflows

    workflow_id = getattr(workflow, "id", workflow)
    if not isinstance(workflow_id, int) or isinstance(workflow_id, bool):
        raise TypeError(f"expected a workflow id or a WorkflowRun, got {workflow!r}"[:300])
    alias = using or conf.get("DATABASE")
    with transaction.atomic(using=alias):
        cancelled, requested = queries.cancel(
            workflows.active_jobs(workflow_id, using=alias), using=alias
        )
    return Cancellation(cancelled, requested)


def retry_now(ids: JobIds, *, using: str | None = None) -> list[int]:
    """FAILED, CANCELLED and COMPLETED_WITH_ERRORS jobs back to PENDING, due now, with their
    attempts counted afresh. Returns the ids retried."""
    return queries.retry_now(job_ids(ids), using=using)


def run_now(ids: JobIds, *, using: str | None = None) -> list[int]:
    """PENDING jobs due later (scheduled, or waiting for a retry) made due now."""
    return queries.run_now(job_ids(ids), using=using)


def duplicate(
    ids: JobIds, *, operated_by: str | None = None, using: str | None = None
) -> list[tuple[int, int]]:
    """A new PENDING copy of each job whose type is registered in this process (same config,
    queue, priority, trace and tenant), due now. Returns (original id, copy id) pairs."""
    from .models import Job

    alias = using or conf.get("DATABASE")
    wanted = job_ids(ids)
    known = list(
        Job.objects.using(alias)
        .filter(id__in=wanted, type__in=registry.registered_types())
        .values_list("id", flat=True)
    )
    return queries.duplicate(known, operated_by=operated_by, using=alias)


def delete_finished(ids: JobIds, *, using: str | None = None) -> list[int]:
    """Delete finished jobs (COMPLETED, COMPLETED_WITH_ERRORS, FAILED, CANCELLED); pending
    and running ones are kept. Returns the ids deleted."""
    return queries.delete_terminal(job_ids(ids), using=using)
