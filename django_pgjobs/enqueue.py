"""enqueue / enqueue_many: validate, insert in the caller's transaction, wake the workers."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import ProgrammingError, transaction
from django.db.models import signals as model_signals
from django.db.models.base import ModelState
from django.utils import timezone

from . import conf, db, flow, queries, registry, signals
from .exceptions import InvalidJobOption, UnknownJobType
from .status import JobStatus
from .tracing import current_trace_id
from .validation import (
    check_max_attempts,
    check_priority,
    check_queue,
    encode_config,
    encode_configs,
)

if TYPE_CHECKING:
    from .models import Job


def _run_at(run_after: datetime | timedelta | float | int | None) -> tuple[datetime | None, float]:
    """(absolute time, delay seconds from the database clock)."""
    if run_after is None:
        return None, 0.0
    if isinstance(run_after, timedelta):
        return None, run_after.total_seconds()
    if isinstance(run_after, datetime):
        if timezone.is_naive(run_after):
            if settings.USE_TZ:
                raise InvalidJobOption(
                    f"run_after {run_after!r} is a naive datetime while USE_TZ is on: pass an "
                    "aware datetime (django.utils.timezone.now() + ...) or a timedelta"
                )
            run_after = timezone.make_aware(run_after)
        return run_after, 0.0
    if isinstance(run_after, int | float) and not isinstance(run_after, bool):
        return None, float(run_after)
    raise InvalidJobOption(
        f"run_after must be a datetime, a timedelta or seconds, got {type(run_after).__name__}"
    )


def _optional_text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    value = str(value)
    if not value or len(value) > 255 or "\x00" in value:
        raise InvalidJobOption(f"{name} must be 1-255 characters without NUL, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidJobOption(
            f"{name} contains a lone surrogate ({exc.reason}); it is not valid UTF-8: {value!r}"
        ) from None
    return value


def _prepare(
    type: str,  # noqa: A002
    *,
    queue: str | None,
    priority: int | None,
    run_after: datetime | timedelta | float | None,
    trace_id: str | None,
    tenant_id: Any,
    operated_by: Any,
    max_attempts: int | None,
    unique_key: str | None,
    flow_key: Any = None,
) -> queries.NewJob:
    spec = registry.get(type) if isinstance(type, str) else None
    if spec is None:
        raise UnknownJobType(str(type), registry.registered_types())
    run_at, delay = _run_at(run_after)
    return queries.NewJob(
        type=type,
        queue=check_queue(queue or spec.effective_queue()),
        priority=check_priority(priority if priority is not None else (spec.priority or 0)),
        config_json="",
        trace_id=_optional_text("trace_id", trace_id or current_trace_id.get()),
        tenant_id=_optional_text("tenant_id", tenant_id),
        operated_by=_optional_text("operated_by", operated_by),
        max_attempts=check_max_attempts(
            max_attempts if max_attempts is not None else spec.effective_max_attempts()
        ),
        unique_key=_optional_text("unique_key", unique_key),
        run_at=run_at,
        delay=delay,
        flow_key=_optional_text("flow_key", flow_key),
    )


def _key_path(queue: str) -> tuple[str, ...] | None:
    """The config path of the queue's flow key (PGJOBS["QUEUES"][queue]["key"]), if any."""
    declared = flow.queues().get(queue)
    return None if declared is None else declared.key


def _encode(config: Any) -> str:
    pgjobs = conf.get_settings()
    return encode_config(
        config, max_bytes=pgjobs["MAX_CONFIG_BYTES"], max_depth=pgjobs["MAX_CONFIG_DEPTH"]
    )


def enqueue(
    type: str,  # noqa: A002 - the job type
    config: Mapping[str, Any] | None = None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | float | None = None,
    trace_id: str | None = None,
    tenant_id: Any = None,
    operated_by: Any = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    flow_key: str | int | None = None,
    using: str | None = None,
) -> Job:
    """Add a job in the current transaction: rolled back with it, visible to workers on commit.

    Everything is checked before anything is written, so a refused job raises an
    :class:`~django_pgjobs.exceptions.EnqueueError` and leaves the caller's transaction usable.

    With ``unique_key``, while a job with that key is PENDING or RUNNING the existing job is
    returned instead (``job.deduplicated`` is True). ``flow_key`` names the job's line in a
    controlled queue (default: the queue's "key" path in the config; docs/flow-control.md).
    """
    new = _prepare(
        type,
        queue=queue,
        priority=priority,
        run_after=run_after,
        trace_id=trace_id,
        tenant_id=tenant_id,
        operated_by=operated_by,
        max_attempts=max_attempts,
        unique_key=unique_key,
        flow_key=flow_key,
    )
    if new.flow_key is None and (path := _key_path(new.queue)):
        new.flow_key = flow.key_of(path, config, new.queue)
    new.config_json = _encode(config)
    alias = using or conf.get("DATABASE")
    for _ in range(5):
        try:
            row = queries.insert_job(new, using=alias)
        except ProgrammingError as exc:  # a try costs nothing on the hot path; a with would
            db.raise_if_not_migrated(exc, alias)
            raise
        if row is not None:
            job = _job_instance(new, config, row, alias)
            if signals.job_enqueued.receivers:  # send() would find none and return
                signals.job_enqueued.send(sender=job.type, job=job)
            return job
        existing = queries.find_active_by_unique_key(new.unique_key or "", using=alias)
        if existing is not None:
            from .models import Job

            job = Job.objects.using(alias).get(pk=existing)
            job.deduplicated = True  # type: ignore[attr-defined]
            return job
        # The holder finished between our INSERT and SELECT: try the insert again.
    raise RuntimeError(f"could not enqueue {type!r} with unique_key {unique_key!r}: contention")


def _job_instance(new: queries.NewJob, config: Any, row: tuple, alias: str) -> Job:
    """The Job just inserted, as Model.from_db would build it from the row read back.

    Built by filling the instance's __dict__ (what Model.__init__ ends up doing for these
    fields) unless something must see the construction: a pre_init/post_init receiver for
    Job, or a field whose descriptor intercepts assignment. Model.__init__'s per-field loop
    was a fifth of a one-job enqueue's client CPU."""
    Job = _job_model()  # noqa: N806 - the model class
    values = {  # every other column is NULL
        **_null_row(),
        "id": row[0],
        "type": new.type,
        "queue": new.queue,
        "priority": new.priority,
        "status": JobStatus.PENDING,
        "config": dict(config or {}),
        "result": {},
        "trace_id": new.trace_id,
        "tenant_id": new.tenant_id,
        "operated_by": new.operated_by,
        "max_attempts": new.max_attempts,
        "unique_key": new.unique_key,
        "flow_key": new.flow_key,
        "attempts": 0,
        "run_after": row[1],
        "created_at": row[2],
        "updated_at": row[2],
        "history": [],
        "cancel_requested": False,
    }
    if _plain_construction(Job):
        job = Job.__new__(Job)
        state = job._state = ModelState()
        state.adding, state.db = False, alias
        job.__dict__.update(values)
    else:
        job = Job.from_db(alias, None, list(values.values()))  # type: ignore[arg-type]  # None: all fields
    job.deduplicated = False  # type: ignore[attr-defined]
    return job


@functools.cache
def _job_model() -> type[Job]:
    from .models import Job  # not at import time: django_pgjobs is imported before the apps

    return Job


@functools.cache
def _null_row() -> dict[str, None]:
    """Job's concrete fields' attnames in order, each None (copied for every new instance)."""
    return dict.fromkeys(f.attname for f in _job_model()._meta.concrete_fields)


def _plain_construction(Job: type[Job]) -> bool:  # noqa: N803 - the model class
    if (model_signals.pre_init.receivers or model_signals.post_init.receivers) and (
        model_signals.pre_init.has_listeners(Job) or model_signals.post_init.has_listeners(Job)
    ):
        return False
    return not _descriptor_fields()


@functools.cache
def _descriptor_fields() -> tuple[str, ...]:
    """Job's concrete fields whose class attribute intercepts assignment (none today)."""
    return tuple(
        name for name in _null_row() if hasattr(getattr(_job_model(), name, None), "__set__")
    )


def enqueue_many(
    type: str,  # noqa: A002
    configs: Iterable[Mapping[str, Any] | None],
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | float | None = None,
    trace_id: str | None = None,
    tenant_id: Any = None,
    operated_by: Any = None,
    max_attempts: int | None = None,
    flow_key: str | int | None = None,
    using: str | None = None,
) -> list[int]:
    """Insert one job per config, all sharing the other options; returns their ids in order.

    One INSERT per 5,000 jobs, all in the caller's transaction; every config is validated first,
    so a bad one refuses the whole batch and writes nothing.
    """
    new = _prepare(
        type,
        queue=queue,
        priority=priority,
        run_after=run_after,
        trace_id=trace_id,
        tenant_id=tenant_id,
        operated_by=operated_by,
        max_attempts=max_attempts,
        unique_key=None,
        flow_key=flow_key,
    )
    configs = list(configs)
    path = _key_path(new.queue) if new.flow_key is None else None
    for config in configs if path else ():  # read again by the INSERT (config #>> path)
        flow.key_of(path or (), config, new.queue)
    chunk = queries.INSERT_MANY_CHUNK
    arrays = [  # every config is checked before anything is written
        encode_configs(
            configs[start : start + chunk],
            max_bytes=conf.get("MAX_CONFIG_BYTES"),
            max_depth=conf.get("MAX_CONFIG_DEPTH"),
            first=start,
        )
        for start in range(0, len(configs), chunk)
    ]
    if not arrays:
        return []
    alias = using or conf.get("DATABASE")
    try:
        with transaction.atomic(using=alias):
            return queries.insert_many(new, arrays, using=alias, key_path=path)
    except ProgrammingError as exc:
        db.raise_if_not_migrated(exc, alias)
        raise
