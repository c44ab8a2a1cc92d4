"""Exceptions raised by django-pgjobs, and the ones a handler raises to steer its job."""

from __future__ import annotations

from datetime import datetime, timedelta


class PgJobsError(Exception):
    """Base class of every django-pgjobs error."""


# --- raised at enqueue time (the caller's transaction stays usable) -------------------------


class EnqueueError(PgJobsError, ValueError):
    """The job was refused before anything was written."""


class UnknownJobType(EnqueueError):
    def __init__(self, job_type: str, known: list[str] | None = None):
        self.job_type = job_type
        hint = ""
        if known is not None:
            hint = f" Registered types: {', '.join(sorted(known)) or '(none)'}."
        super().__init__(
            f"unknown job type {job_type!r}: no @handler is registered for it.{hint} "
            "Define it with @django_pgjobs.handler in a `jobs.py` module of an installed app."
        )


class InvalidJobConfig(EnqueueError):
    """The config is not plain JSON (or breaks a limit): it would not survive the round trip."""


class ConfigTooLarge(InvalidJobConfig):
    pass


class InvalidJobOption(EnqueueError):
    """A bad queue name, priority, run_after, max_attempts … passed to enqueue."""


# --- raised by handlers ------------------------------------------------------------------------


class Retry(PgJobsError):  # noqa: N818 - reads as an instruction: raise Retry(...)
    """Raise from a handler to try again later, at a time you choose.

    ``Retry(delay=timedelta(minutes=5))`` or ``Retry(at=aware_datetime)``; with neither, the
    handler type's backoff applies. The attempt still counts: when attempts are exhausted the job
    ends FAILED.
    """

    def __init__(
        self,
        reason: str = "",
        *,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
    ):
        if delay is not None and at is not None:
            raise ValueError("Retry takes delay= or at=, not both")
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        self.delay = delay
        self.at = at
        super().__init__(reason or "retry requested by the handler")


class Fail(PgJobsError):  # noqa: N818 - reads as an instruction: raise Fail(...)
    """Raise from a handler to fail the job at once, without retrying (it goes to FAILED)."""


class JobTimeout(PgJobsError):
    """Recorded as the error of a job whose handler ran longer than its ``timeout``."""


class LeaseLost(PgJobsError):
    """The worker no longer holds the job: another worker (or the reaper) took it over."""
