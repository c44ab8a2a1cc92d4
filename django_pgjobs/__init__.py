"""django-pgjobs: a background-job queue that lives in the PostgreSQL you already have.

Public API::

    from django_pgjobs import handler, schedule, enqueue, enqueue_many, enqueue_on_commit,
                              JobStatus, Retry, Fail
"""

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]),
# `manage.py pgjobs_health` and the admin dashboard show it.
__version__ = "0.1.0.dev0"

from .context import JobContext
from .enqueue import enqueue, enqueue_many
from .exceptions import (
    ConfigTooLarge,
    EnqueueError,
    Fail,
    InvalidJobConfig,
    InvalidJobOption,
    JobTimeout,
    PgJobsError,
    Retry,
    UnknownJobType,
)
from .on_commit import enqueue_on_commit
from .registry import handler
from .scheduler import schedule
from .status import JobStatus

__all__ = [
    "ConfigTooLarge",
    "EnqueueError",
    "Fail",
    "InvalidJobConfig",
    "InvalidJobOption",
    "JobContext",
    "JobStatus",
    "JobTimeout",
    "PgJobsError",
    "Retry",
    "UnknownJobType",
    "enqueue",
    "enqueue_many",
    "enqueue_on_commit",
    "handler",
    "schedule",
]
