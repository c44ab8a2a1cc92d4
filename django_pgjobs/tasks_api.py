"""Django's Tasks framework, wherever it comes from: ``django.tasks`` on Django 6.x, the
``django-tasks`` backport (module ``django_tasks``) on Django 5.2. Every module of ours that uses
the Tasks API imports it from here; ``AVAILABLE`` is False when neither is installed."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

try:  # Django >= 6.0
    from django.tasks import (
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task_backends,
    )
    from django.tasks import task as framework_task
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    MODULE = "django.tasks"
except ImportError:
    try:  # Django 5.2 with the backport
        from django_tasks import (  # type: ignore[assignment,no-redef,unused-ignore]
            TaskContext,
            TaskResult,
            TaskResultStatus,
            default_task_backend,
            task_backends,
        )
        from django_tasks import task as framework_task  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.base import Task, TaskError  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[assignment,no-redef,unused-ignore]
        from django_tasks.utils import normalize_json  # type: ignore[assignment,no-redef,unused-ignore]

        MODULE = "django_tasks"
    except ImportError:
        MODULE = ""

AVAILABLE = bool(MODULE)
_TAKES_EXTRA = AVAILABLE and any(  # Django 6.1 and the backport: @task(**options)
    p.kind is inspect.Parameter.VAR_KEYWORD
    for p in inspect.signature(framework_task).parameters.values()
)
MISSING = (
    "Django's Tasks framework is not installed: on Django 5.2 it comes from the django-tasks "
    "backport, `pip install 'django-pgjobs[tasks]'` (or `pip install django-tasks`) and add "
    "'django_tasks' to INSTALLED_APPS; Django 6.0 and later ship it as django.tasks"
)

__all__ = [
    "AVAILABLE",
    "MISSING",
    "MODULE",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "default_task_backend",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


_STANDARD = ("priority", "queue_name", "backend", "takes_context")


def task(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Django's ``@task``, taking django-pgjobs' options (``max_attempts``, ``backoff``,
    ``timeout``, ``unique_key`` …) on every version: Django 6.1 and the backport hand extra
    options to the backend's task class, 6.0's decorator refuses them, so the task is built
    here the way 6.1 builds it."""
    require()
    extra = {k: v for k, v in options.items() if k not in _STANDARD}
    if not extra or _TAKES_EXTRA:
        return framework_task(function, **options) if function else framework_task(**options)
    standard = {k: v for k, v in options.items() if k in _STANDARD}

    def wrapper(f: Callable[..., Any]) -> Any:
        backend = standard.get("backend", "default")
        return task_backends[backend].task_class(
            priority=standard.get("priority", 0),
            func=f,
            queue_name=standard.get("queue_name", "default"),
            backend=backend,
            takes_context=standard.get("takes_context", False),
            run_after=None,
            **extra,
        )

    return wrapper(function) if function else wrapper


def require() -> None:
    """Raise ImproperlyConfigured naming the package to install when the API is missing."""
    if not AVAILABLE:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(MISSING)


def __getattr__(name: str) -> Any:  # only reached when the API is missing
    if name in __all__:
        require()
    raise AttributeError(name)
