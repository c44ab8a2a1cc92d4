"""enqueue / enqueue_many: validate, insert in the caller's transaction, wake the workers."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import ProgrammingError, transaction
from django.db.models import signals as model_signals
from django.db.models.base import ModelState
from django.utils import timezone

from . import conf, db, flow, queries, registry, signals
from .exceptions import InvalidJobOption, UnknownJobType
from .sql import unique as sql_unique
from .status import JobStatus
from .tracing import current_trace_id
from .validation import (
    Flow,
    check_flow,
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
    unique_for: timedelta | float | None = None,
    debounce: timedelta | float | None = None,
    debounce_key: str | None = None,
    debounce_max_wait: timedelta | float | None = None,
    flow_key: str | int | None = None,
    using: str | None = None,
) -> Job:
    """Add a job in the current transaction: rolled back with it, visible to workers on commit.

    Everything is checked before anything is written, so a refused job raises an
    :class:`~django_pgjobs.exceptions.EnqueueError` and leaves the caller's transaction usable.

    With ``unique_key``, while a job with that key is PENDING or RUNNING the existing job is
    returned instead (``job.deduplicated`` is True); with ``unique_for`` too, the key stays
    taken for that long after the enqueue, even once the job finished or was pruned.
    With ``debounce`` and ``debounce_key``, the job waits ``debounce``; an enqueue of the same
    type and key meanwhile replaces its config and restarts the wait, at most until
    ``debounce_max_wait`` after the first (``job.deduplicated`` is True for a merged enqueue).
    ``flow_key`` names the job's line in a controlled queue (default: the queue's "key" path
    in the config). See docs/flow-control.md.
    """
    window = check_flow(
        unique_key=unique_key,
        unique_for=unique_for,
        debounce=debounce,
        debounce_key=debounce_key,
        debounce_max_wait=debounce_max_wait,
        run_after=run_after,
    )
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
    new.debounce_key = _optional_text("debounce_key", debounce_key)
    if new.flow_key is None and (path := _key_path(new.queue)):
        new.flow_key = flow.key_of(path, config, new.queue)
    new.config_json = _encode(config)
    alias = using or conf.get("DATABASE")
    try:
        if window.debounce is not None:
            return _debounced(new, config, window, alias)
        return _inserted(new, config, window, alias)
    except ProgrammingError as exc:  # a try costs nothing on the hot path; a with would
        db.raise_if_not_migrated(exc, alias)
        raise


def _inserted(new: queries.NewJob, config: Any, window: Flow, alias: str) -> Job:
    """Insert the job; with a unique key, the job holding it when the key is taken."""
    for _ in range(5):
        if window.unique_for is not None:
            row = queries.insert_windowed(new, window.unique_for, using=alias)
        else:
            row = queries.insert_job(new, using=alias)
        if row is not None:
            return _announced(_job_instance(new, config, row, alias))
        holder = _holder(new, windowed=window.unique_for is not None, alias=alias)
        if holder is not None:
            return holder
        # The holder finished (its window passed) between our INSERT and SELECT: try again.
    raise RuntimeError(
        f"could not enqueue {new.type!r} with unique_key {new.unique_key!r}: contention"
    )


def _announced(job: Job) -> Job:
    if signals.job_enqueued.receivers:  # send() would find none and return
        signals.job_enqueued.send(sender=job.type, job=job)
    return job


def _holder(new: queries.NewJob, *, windowed: bool, alias: str) -> Job | None:
    """The job that holds ``new.unique_key``: an active one, else (``windowed``) the one that
    opened the key's open window, even once pruned (then a Job not in the database)."""
    from .models import Job

    key = new.unique_key or ""
    if windowed:
        job_id = sql_unique.holder(key, using=alias)
    else:
        job_id = queries.find_active_by_unique_key(key, using=alias)
    if job_id is None:
        return None
    job = Job.objects.using(alias).filter(pk=job_id).first()
    if job is None:  # pruned: what the window still knows
        job = Job(id=job_id, type=new.type, queue=new.queue, unique_key=key)
        job._state.adding, job._state.db = False, alias
        job.__dict__["status"] = None
        job.holder_pruned = True  # type: ignore[attr-defined]
    job.deduplicated = True  # type: ignore[attr-defined]
    return job


def _debounced(new: queries.NewJob, config: Any, window: Flow, alias: str) -> Job:
    """Insert the debounced job, or merge it into its key's open job."""
    assert window.debounce is not None  # noqa: S101 - the caller's test
    row = queries.insert_debounced(new, window.debounce, window.debounce_max_wait, using=alias)
    job_id, run_after, created_at, inserted, *options = row
    if not inserted:  # the open job keeps its own options; it now runs this config
        new = replace(
            new,
            queue=options[0],
            priority=options[1],
            trace_id=options[2],
            tenant_id=options[3],
            operated_by=options[4],
            max_attempts=options[5],
        )
    job = _job_instance(new, config, (job_id, run_after, created_at), alias)
    job.deduplicated = not inserted  # type: ignore[attr-defined]
    return _announced(job) if inserted else job


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
        "debounce_key": new.debounce_key,
        "flow_key": new.flow_key,
        "attempts": 0,
        "run_after": row[1],
        "created_at": row[2],
        "updated_at": row[2],
        "history": [],
        "cancel_requested": False,
        "deps_open": 0,
        "deps_failed": 0,
        "has_dependants": False,
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


_ONE_AT_A_TIME = ("unique_key", "unique_for", "debounce", "debounce_key", "debounce_max_wait")


def _refuse_many(options: dict[str, Any]) -> None:
    for name in options:
        if name in _ONE_AT_A_TIME:
            raise InvalidJobOption(
                f"enqueue_many() takes no {name}: each job of a batch would hold or merge on "
                "the same key; call enqueue() once per job instead"
            )
        raise TypeError(f"enqueue_many() got an unexpected keyword argument {name!r}")


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
    **refused: Any,
) -> list[int]:
    """Insert one job per config, all sharing the other options; returns their ids in order.

    One INSERT per 5,000 jobs, all in the caller's transaction; every config is validated first,
    so a bad one refuses the whole batch and writes nothing. Unique keys, unique windows and
    debounce are for enqueue() only.
    """
    _refuse_many(refused)
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
