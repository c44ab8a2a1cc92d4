"""Job type -> handler. The worker dispatches only through this table: a type read from the
database is looked up here and never imported."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from . import conf
from .validation import check_max_attempts, check_priority, check_queue

BackoffFn = Callable[[int], float]
TASK_TYPE_PREFIX = "task:"  # the job types of Django @task functions: task:<module>.<name>


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    type: str
    func: Callable[..., Any]
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    backoff_base: float | None = None
    backoff_max: float | None = None
    backoff: BackoffFn | None = None
    timeout: float | None = None
    transactional: bool = False
    # How a raised exception becomes the job's `error` (default: the traceback). The Django
    # Tasks bridge puts the exception class path first (tasks_registry.task_error_text).
    format_error: Callable[[BaseException], str] | None = None

    is_async: bool = field(init=False)  # read per run: computed once

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.func))

    def effective_queue(self) -> str:
        return self.queue or conf.get("DEFAULT_QUEUE")

    def effective_max_attempts(self) -> int:
        return self.max_attempts or conf.get("MAX_ATTEMPTS")

    def effective_timeout(self) -> float | None:
        return self.timeout if self.timeout is not None else conf.get("TIMEOUT")


_registry: dict[str, HandlerSpec] = {}
_late: set[str] = set()  # first registered after Django's setup: a worker may not import them


def register(spec: HandlerSpec) -> HandlerSpec:
    existing = _registry.get(spec.type)
    if existing is not None and existing.func is not spec.func:
        same_place = getattr(existing.func, "__module__", None) == getattr(
            spec.func, "__module__", None
        ) and getattr(existing.func, "__qualname__", None) == getattr(
            spec.func, "__qualname__", None
        )
        if not same_place:  # re-import of the same module (autoreload, tests) is fine
            raise ImproperlyConfigured(
                f"job type {spec.type!r} is registered twice: by "
                f"{existing.func.__module__}.{existing.func.__qualname__} and "
                f"{spec.func.__module__}.{spec.func.__qualname__}"
            )
    if spec.type not in _registry and apps.ready:
        _late.add(spec.type)
    _registry[spec.type] = spec
    return spec


def handler(
    type: str,  # noqa: A002 - the job type, as stored in the `type` column
    *,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    backoff: BackoffFn | None = None,
    timeout: float | None = None,
    transactional: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func(job)`` as the handler of a job type, with that type's defaults.

    ``backoff`` is either ``backoff_base``/``backoff_max`` (exponential: base * 2**(attempt-1),
    capped, with jitter) or a callable ``attempt -> seconds``.

    ``transactional=True`` runs the handler inside ``transaction.atomic()`` and records the
    job's completion in that same transaction, fenced by the lease: the handler's database
    writes and the COMPLETED status commit together or not at all (exactly-once effects for a
    handler that only writes to this database).
    """
    if not isinstance(type, str) or not type or len(type) > 255:
        raise ImproperlyConfigured(f"job type must be a non-empty string of <= 255 chars: {type!r}")
    if queue is not None:
        check_queue(queue)
    if priority is not None:
        check_priority(priority)
    if max_attempts is not None:
        check_max_attempts(max_attempts)
    if timeout is not None and timeout <= 0:
        raise ImproperlyConfigured(f"timeout must be > 0 seconds, got {timeout!r}")
    if backoff is not None and inspect.iscoroutinefunction(backoff):
        raise ImproperlyConfigured(
            f"job type {type!r}: backoff= must be a sync function attempt -> seconds, not "
            "`async def` (the worker calls it on its claim thread)"
        )

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        if transactional and inspect.iscoroutinefunction(func):
            raise ImproperlyConfigured(
                f"job type {type!r}: transactional=True needs a sync handler (Django's "
                "transaction.atomic() does not span an event loop)"
            )
        register(
            HandlerSpec(
                type=type,
                func=func,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                backoff_base=backoff_base,
                backoff_max=backoff_max,
                backoff=backoff,
                timeout=timeout,
                transactional=transactional,
            )
        )
        return func

    return decorator


def get(job_type: str) -> HandlerSpec | None:
    return _registry.get(job_type)


def registered_types() -> list[str]:
    return list(_registry)


def setup_types() -> list[str]:
    """Types registered while Django set up (models, AppConfig.ready, autodiscovery): those a
    runjobs process with the same settings registers too."""
    return [t for t in _registry if t not in _late]


def unregister(job_type: str) -> None:
    """Remove a type (for tests)."""
    _registry.pop(job_type, None)
    _late.discard(job_type)


# Said wherever a job waits for a type this process does not know.
REGISTER_HINT = (
    "A worker knows the @handler and @task functions of the modules it imports at "
    "startup: PGJOBS['AUTODISCOVER_MODULES'] (jobs.py, tasks.py) of each installed "
    "app, and what they import; see docs/tasks.md, 'Registering tasks'"
)


def autodiscover() -> None:
    for module in conf.get("AUTODISCOVER_MODULES"):
        autodiscover_modules(module)
