"""Shared helpers of the schedule, retention, queue-control and health tests."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as _timezone

import pytest

from django_pgjobs import registry, scheduler

UTC = _timezone.utc  # datetime.UTC is Python >= 3.11


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def entry(**overrides: object) -> dict[str, object]:
    """A valid schedule entry: test.echo every minute, UTC."""
    return {
        "type": "test.echo",
        "cron": "* * * * *",
        "timezone": "UTC",
        "config": {"n": 1},
        **overrides,
    }


@pytest.fixture
def schedules(settings):
    """schedules(name=entry(...), ...) sets PGJOBS['SCHEDULES'] for one test."""

    def configure(**entries: dict[str, object]) -> None:
        settings.PGJOBS = {**settings.PGJOBS, "SCHEDULES": entries}

    return configure


@pytest.fixture
def clean_decorators():
    """Forget the @schedule and @handler declarations a test makes."""
    decorated = list(scheduler._decorated)
    types = set(registry.registered_types())
    yield
    scheduler._decorated[:] = decorated
    for t in set(registry.registered_types()) - types:
        registry.unregister(t)
