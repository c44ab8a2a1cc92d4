"""pytest fixtures for django-pgjobs. Enable them in your root ``conftest.py``::

    pytest_plugins = ["django_pgjobs.contrib.pytest_plugin"]

    @pytest.mark.django_db
    def test_signup_sends_welcome(pgjobs):
        signup("a@example.com")
        pgjobs.assert_enqueued(send_welcome, args=["a@example.com"])
        pgjobs.run()                       # django_pgjobs.testing.run_jobs
        assert mail.outbox

    @pytest.mark.django_db
    def test_checkout(pgjobs_eager):       # every enqueue in the test runs its job at once
        ...

The fixtures need database access: mark the test with ``django_db`` (either flavour).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .. import testing


class PgJobs:
    """The helpers of :mod:`django_pgjobs.testing`, as one fixture."""

    run = staticmethod(testing.run_jobs)
    assert_enqueued = staticmethod(testing.assert_enqueued)
    assert_not_enqueued = staticmethod(testing.assert_not_enqueued)
    capture = staticmethod(testing.capture_enqueued)
    eager = staticmethod(testing.eager)

    @property
    def jobs(self) -> list[Any]:
        """Every job row, in id order."""
        from ..models import Job

        return list(Job.objects.order_by("id"))


@pytest.fixture
def pgjobs() -> PgJobs:
    return PgJobs()


@pytest.fixture
def pgjobs_eager(pgjobs: PgJobs) -> Iterator[PgJobs]:
    with testing.eager():
        yield pgjobs
