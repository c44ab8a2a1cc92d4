"""Retry policy: pure functions of (attempt, policy, randomness). No clock, no database."""

from __future__ import annotations

import random
from collections.abc import Callable

from . import conf
from .registry import HandlerSpec


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
    delay = min(cap, base * (2 ** min(attempt - 1, 62)))
    if jitter:
        delay *= 1 + jitter * (2 * rand() - 1)
    return max(0.0, delay)


def retry_delay(spec: HandlerSpec | None, attempt: int, rand: Callable[[], float] = random.random) -> float:
    """The backoff of a job type for the attempt that just failed."""
    if spec is not None and spec.backoff is not None:
        return max(0.0, float(spec.backoff(attempt)))
    base = spec.backoff_base if spec and spec.backoff_base is not None else conf.get("BACKOFF_BASE")
    cap = spec.backoff_max if spec and spec.backoff_max is not None else conf.get("BACKOFF_MAX")
    return exponential_backoff(
        attempt, base=base, cap=cap, jitter=conf.get("BACKOFF_JITTER"), rand=rand
    )


def attempts_left(attempts: int, max_attempts: int) -> bool:
    """True when a failed job may run again (attempts are counted at claim)."""
    return attempts < max_attempts
