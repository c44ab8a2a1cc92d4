"""Retry policy: what happens after a failed attempt. Pure functions of (attempt, policy,
randomness): no clock, no database. The executor (a raised error, a timeout) and the reaper
(an expired lease) both ask :func:`decide`."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from . import conf
from .exceptions import (
    MAX_RETRY_DELAY,
    Cancelled,
    Fail,
    LeaseLost,
    Retry,
    retry_delay_seconds,
    retry_time,
)
from .registry import HandlerSpec
from .status import JobStatus


@dataclass(frozen=True, slots=True)
class Decision:
    status: str  # JobStatus.PENDING (run again), FAILED, or CANCELLED (the handler's Cancelled)
    note: str  # the history's outcome: retry, attempts_exhausted, failed, lease_lost, cancelled
    delay: float | None = None  # seconds after the database's now()
    run_at: datetime | None = None
    problem: str | None = None  # why the handler's Retry or the type's backoff was not used


def decide(
    spec: HandlerSpec | None,
    attempts: int,
    max_attempts: int,
    exc: BaseException | None = None,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """The fate of a job whose attempt ``attempts`` failed with ``exc`` (None: its lease
    expired). ``spec`` None (a type not registered here) takes the global policy."""
    if isinstance(exc, Fail):
        return Decision(JobStatus.FAILED, "failed")
    if isinstance(exc, Cancelled):
        return Decision(JobStatus.CANCELLED, "cancelled")
    if isinstance(exc, LeaseLost):  # the finalize will be refused too: nothing is overwritten
        return Decision(JobStatus.FAILED, "lease_lost")
    if not attempts_left(attempts, max_attempts):
        return Decision(JobStatus.FAILED, "attempts_exhausted")
    problem = None
    if isinstance(exc, Retry):  # re-checked: its attributes may have changed since __init__
        try:
            at, delay = retry_time(exc.at), retry_delay_seconds(exc.delay)
        except (TypeError, ValueError) as bad:
            problem = f"{bad}; retried on the type's backoff instead"
        else:
            if at is not None or delay is not None:
                return Decision(JobStatus.PENDING, "retry", delay=delay, run_at=at)
    delay, backoff_problem = backoff(spec, attempts, rand)
    return Decision(JobStatus.PENDING, "retry", delay=delay, problem=problem or backoff_problem)


def backoff(
    spec: HandlerSpec | None, attempt: int, rand: Callable[[], float] = random.random
) -> tuple[float, str | None]:
    """Seconds before the next attempt, by the type's policy, and the problem if its
    ``backoff`` callable failed (then the exponential policy answers instead)."""
    if spec is not None and spec.backoff is not None:
        try:
            delay = spec.backoff(attempt)
            if isinstance(delay, bool) or not isinstance(delay, int | float):
                raise TypeError(f"returned {delay!r}, not a number of seconds")
            if not math.isfinite(delay) or delay > MAX_RETRY_DELAY:
                raise ValueError(f"returned {delay!r}, not finite seconds <= {MAX_RETRY_DELAY}")
            return max(0.0, float(delay)), None
        except Exception as exc:  # noqa: BLE001 - a bad policy must not lose the job
            problem = (
                f"the type's backoff({attempt}) failed ({exc.__class__.__name__}: "
                f"{exc}); retried on the exponential backoff instead"
            )
            return _exponential(None, attempt, rand), problem
    return _exponential(spec, attempt, rand), None


def _exponential(spec: HandlerSpec | None, attempt: int, rand: Callable[[], float]) -> float:
    base = spec.backoff_base if spec and spec.backoff_base is not None else conf.get("BACKOFF_BASE")
    cap = spec.backoff_max if spec and spec.backoff_max is not None else conf.get("BACKOFF_MAX")
    return exponential_backoff(
        attempt, base=base, cap=cap, jitter=conf.get("BACKOFF_JITTER"), rand=rand
    )


def exponential_backoff(
    attempt: int,
    *,
    base: float,
    cap: float,
    jitter: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    ``base * 2**(attempt-1)``, capped at ``cap``, then spread by +/- ``jitter`` (a fraction) so
    that jobs failing together do not retry together.
    """
    attempt = max(1, attempt)
    delay = min(cap, base * 2.0 ** min(attempt - 1, 62))
    if jitter:
        delay *= 1 + jitter * (2 * rand() - 1)
    return max(0.0, delay)


def attempts_left(attempts: int, max_attempts: int) -> bool:
    """True when a failed job may run again (attempts are counted at claim)."""
    return attempts < max_attempts
