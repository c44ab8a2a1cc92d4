"""django-pgjobs: a background-job queue that lives in the PostgreSQL you already have.

Public API::

    from django_pgjobs import handler, schedule, enqueue, enqueue_many, enqueue_on_commit,
                              JobStatus, Retry, Fail
    from django_pgjobs import Cancelled                       # a handler ends its job CANCELLED
    from django_pgjobs import cancel, retry_now, run_now, duplicate, delete_finished  # operators
    from django_pgjobs import Workflow, Batch, chain, group, chord, job   # workflows.py
    from django_pgjobs import cancel_workflow
"""

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]),
# `manage.py pgjobs_health` and the admin dashboard show it.
__version__ = "0.1.0.dev0"

from .context import JobContext
from .enqueue import enqueue, enqueue_many
from .exceptions import (
    Cancelled,
    ConfigTooLarge,
    EnqueueError,
    Fail,
    InvalidJobConfig,
    InvalidJobOption,
    InvalidProgress,
    JobTimeout,
    PgJobsError,
    Retry,
    UnknownJobType,
)
from .on_commit import enqueue_on_commit
from .operations import (
    Cancellation,
    cancel,
    cancel_workflow,
    delete_finished,
    duplicate,
    retry_now,
    run_now,
)
from .registry import handler
from .scheduler import schedule
from .status import JobStatus
from .workflows import Batch, JobSpec, Workflow, WorkflowRun, chain, chord, group, job

__all__ = [
    "Cancelled",
    "ConfigTooLarge",
    "EnqueueError",
    "Fail",
    "InvalidJobConfig",
    "InvalidProgress",
    "InvalidJobOption",
    "JobContext",
    "JobStatus",
    "JobTimeout",
    "PgJobsError",
    "Retry",
    "UnknownJobType",
    "Batch",
    "Cancellation",
    "JobSpec",
    "Workflow",
    "WorkflowRun",
    "chain",
    "chord",
    "group",
    "job",
    "cancel",
    "cancel_workflow",
    "delete_finished",
    "duplicate",
    "enqueue",
    "enqueue_many",
    "enqueue_on_commit",
    "handler",
    "retry_now",
    "run_now",
    "schedule",
]
