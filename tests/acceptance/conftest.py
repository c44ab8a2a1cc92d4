"""Fixtures of the fault-injection suite.

Scenarios marked ``@pytest.mark.slow`` run only when asked for: ``-m slow`` (or any ``-m``
expression that selects them) or ``PGJOBS_SLOW=1``; the default run stays fast.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest

from .invariants import Invariants


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr or os.environ.get("PGJOBS_SLOW") == "1":
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture
def invariants(transactional_db: None) -> Iterator[Invariants]:
    """The scenario's invariant checker; call ``invariants.check(...)`` at its end."""
    yield Invariants.begin()


_DB_ERROR = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?database error in the worker loop "
    r"\((.*)\); retrying in ([0-9.]+)s",
    re.MULTILINE,
)


@dataclass(frozen=True)
class DbError:
    at: float  # seconds (the worker's log clock)
    message: str
    delay: float


def db_errors(output: str) -> list[DbError]:
    """Each `worker.db_error` line of a worker's output (runjobs' default log format)."""
    return [
        DbError(
            datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(),
            m.group(2),
            float(m.group(3)),
        )
        for m in _DB_ERROR.finditer(output)
    ]


def assert_backs_off(errors: list[DbError]) -> None:
    """Delays grow and each retry waited (about) the delay it announced: no busy loop."""
    delays = [e.delay for e in errors]
    assert delays == sorted(delays) and max(delays) <= 30, delays
    for before, after in zip(errors, errors[1:], strict=False):
        waited = after.at - before.at
        assert waited >= before.delay * 0.9 - 0.05, (
            f"retried after {waited:.3f}s although it announced {before.delay}s: busy loop\n"
            + "\n".join(f"+{e.at - errors[0].at:.3f}s delay={e.delay} {e.message}" for e in errors)
        )
