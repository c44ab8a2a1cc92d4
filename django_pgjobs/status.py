"""Job states. Kept free of model imports so the public API can be imported before apps load."""

from django.db import models


class JobStatus(models.TextChoices):
    WAITING = "WAITING", "Waiting"  # a workflow step whose dependencies have not all ended
    PENDING = "PENDING", "Pending"
    RUNNING = "RUNNING", "Running"
    COMPLETED = "COMPLETED", "Completed"
    COMPLETED_WITH_ERRORS = "COMPLETED_WITH_ERRORS", "Completed with errors"
    FAILED = "FAILED", "Failed"
    CANCELLED = "CANCELLED", "Cancelled"


# Workflows: what a failed step does to its dependants, and when a dependant may run.
ON_FAILURE = ("cancel", "continue", "ignore")
EDGE_MODES = ("success", "failure", "complete")

ACTIVE_STATUSES = (JobStatus.PENDING, JobStatus.RUNNING)
TERMINAL_STATUSES = (
    JobStatus.COMPLETED,
    JobStatus.COMPLETED_WITH_ERRORS,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)
RETRYABLE_STATUSES = (JobStatus.FAILED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.CANCELLED)


# --- statuses in SQL: always built from the enum (tests/unit/test_sql_statuses.py checks it) ---


def sql_literal(status: str) -> str:
    """One status as an SQL string literal: ``'PENDING'`` (refuses what is not a JobStatus)."""
    return f"'{JobStatus(status).value}'"


def sql_in(*statuses: str) -> str:
    """A parenthesised SQL list for ``status IN …``: ``('PENDING', 'RUNNING')``."""
    return "(" + ", ".join(map(sql_literal, statuses)) + ")"


WAITING_SQL = sql_literal(JobStatus.WAITING)
PENDING_SQL = sql_literal(JobStatus.PENDING)
RUNNING_SQL = sql_literal(JobStatus.RUNNING)
FAILED_SQL = sql_literal(JobStatus.FAILED)
CANCELLED_SQL = sql_literal(JobStatus.CANCELLED)
ACTIVE_SQL = sql_in(*ACTIVE_STATUSES)
TERMINAL_SQL = sql_in(*TERMINAL_STATUSES)
RETRYABLE_SQL = sql_in(*RETRYABLE_STATUSES)
FAILURE_SQL = sql_in(JobStatus.FAILED, JobStatus.CANCELLED)  # a dependency that did not succeed
