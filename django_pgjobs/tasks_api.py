"""Django's Tasks framework, wherever it comes from: ``django.tasks`` on Django 6.x, the
``django-tasks`` backport (module ``django_tasks``) on Django 5.2. Every module of ours that uses
the Tasks API imports it from here; ``AVAILABLE`` is False when neither is installed."""

from __future__ import annotations

from typing import Any

try:  # Django >= 6.0
    from django.tasks import (
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
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
        from django_tasks import (
            TaskContext,
            TaskResult,
            TaskResultStatus,
            default_task_backend,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        MODULE = "django_tasks"
    except ImportError:
        MODULE = ""

AVAILABLE = bool(MODULE)
MISSING = (
    "Django's Tasks framework is not installed: on Django 5.2 it comes from the django-tasks "
    "backport, `pip install 'django-pgjobs[tasks]'` (or `pip install django-tasks`) and add "
    "'django_tasks' to INSTALLED_APPS; Django 6.0 and later ship it as django.tasks"
)

__all__ = [
    "AVAILABLE", "MISSING", "MODULE", "BaseTaskBackend", "InvalidTask", "InvalidTaskBackend",
    "Task", "TaskContext", "TaskError", "TaskResult", "TaskResultDoesNotExist",
    "TaskResultMismatch", "TaskResultStatus", "default_task_backend", "normalize_json", "task",
    "task_backends",
    "task_enqueued", "task_finished", "task_started",
]


def require() -> None:
    """Raise ImproperlyConfigured naming the package to install when the API is missing."""
    if not AVAILABLE:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(MISSING)


def __getattr__(name: str) -> Any:  # only reached when the API is missing
    if name in __all__:
        require()
    raise AttributeError(name)
