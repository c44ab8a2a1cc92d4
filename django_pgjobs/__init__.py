"""django-pgjobs: a background-job queue that lives in the PostgreSQL you already have.

Public API::

    from django_pgjobs import handler, schedule, enqueue, enqueue_many, JobStatus, Retry, Fail
"""

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
    "handler",
    "schedule",
]
__version__ = "0.1.0.dev0"
