"""Exceptions raised by django-pgjobs, and the ones a handler raises to steer its job."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any


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


MAX_RETRY_DELAY = 10 * 365 * 86400  # seconds: a Retry further out than this is a mistake


class Retry(PgJobsError):  # noqa: N818 - reads as an instruction: raise Retry(...)
    """Raise from a handler to try again later, at a time you choose.

    ``Retry(delay=timedelta(minutes=5))`` (or seconds; negative means now) or
    ``Retry(at=aware_datetime)``; with neither, the handler type's backoff applies. The attempt
    still counts: when attempts are exhausted the job ends FAILED. Bad arguments raise
    TypeError/ValueError here, in the handler, and the job's error says why.
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
        self.delay = retry_delay_seconds(delay)
        self.at = retry_time(at)
        super().__init__(reason or "retry requested by the handler")


def retry_delay_seconds(delay: Any) -> float | None:
    """``Retry(delay=...)`` as seconds from now, or TypeError/ValueError saying what is wrong."""
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        delay = delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise TypeError(f"Retry(delay=...) takes seconds or a timedelta, got {delay!r}")
    if not math.isfinite(delay):
        raise ValueError(f"Retry(delay={delay!r}) must be a finite number of seconds")
    if delay > MAX_RETRY_DELAY:
        raise ValueError(
            f"Retry(delay={delay!r}) must be at most {MAX_RETRY_DELAY} seconds (10 years)"
        )
    return max(0.0, float(delay))


def retry_time(at: Any) -> datetime | None:
    """``Retry(at=...)`` checked: an aware datetime, or TypeError/ValueError saying why not."""
    if at is None:
        return None
    if not isinstance(at, datetime):
        raise TypeError(f"Retry(at=...) needs an aware datetime, got {type(at).__name__} {at!r}")
    if at.utcoffset() is None:
        raise ValueError(
            f"Retry(at={at!r}) needs an aware datetime (with a time zone); "
            "use django.utils.timezone.now() + timedelta(...)"
        )
    return at


class Fail(PgJobsError):  # noqa: N818 - reads as an instruction: raise Fail(...)
    """Raise from a handler to fail the job at once, without retrying (it goes to FAILED)."""


class Cancelled(PgJobsError):  # noqa: N818 - reads as what happened: raise Cancelled()
    """Raise from a handler that stopped because ``job.cancel_requested`` turned true: the job
    ends CANCELLED (no retry). Raised without a cancel request, it cancels the job all the same."""

    def __init__(self, reason: str = ""):
        super().__init__(reason or "cancelled by the handler after a cancel request")


class InvalidProgress(PgJobsError, ValueError, TypeError):
    """``job.progress(...)`` got a value it cannot store; nothing was recorded, the job goes on."""


class JobTimeout(PgJobsError):
    """Recorded as the error of a job whose handler ran longer than its ``timeout``."""


class NotMigrated(PgJobsError):
    """The django-pgjobs tables are not in the database (yet): run ``manage.py migrate``."""

    def __init__(self, alias: str):
        self.alias = alias
        super().__init__(
            f"the django-pgjobs tables do not exist in database {alias!r}: run "
            "`manage.py migrate` first"
        )


class LeaseLost(PgJobsError):
    """The worker no longer holds the job: another worker (or the reaper) took it over."""
