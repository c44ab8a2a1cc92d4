"""JobContext's worker side: the one interface through which the worker changes a running job."""

import time
from datetime import datetime, timezone
from uuid import uuid4

import pytest

from django_pgjobs.context import JobContext


def job(**kwargs):
    return JobContext(
        id=1,
        type="t",
        queue="default",
        priority=0,
        config={},
        attempts=1,
        max_attempts=3,
        trace_id=None,
        tenant_id=None,
        created_at=datetime.now(timezone.utc),
        worker_id="w",
        lease_token=uuid4(),
        **kwargs,
    )


def test_a_renewed_lease_holds_until_then_and_a_lost_one_stays_lost():
    j = job(lease_until=time.monotonic() + 60)
    j.renewed(time.monotonic() + 120)
    assert j.lease_until > time.monotonic() + 100 and not j.lease_lost
    j = job(lease_until=time.monotonic() - 1)  # ran out by our clock
    assert j.lease_lost and not j.lease_marked_lost
    j.renewed(time.monotonic() + 120)
    assert j.lease_lost  # a renewal that comes too late does not bring it back
    j.lose_lease()
    assert j.lease_marked_lost


def test_cancel_requests_and_progress_reports_go_through_the_interface():
    j, reports = job(), []
    j.set_cancel_requested(True)
    assert j.cancel_requested
    j.attach_progress(reports.append)
    assert j.progress_attached
    j.progress(1, 2)
    j.detach_progress()
    j.progress(2, 2)  # remembered for the outcome, not reported
    assert reports == [j] and not j.progress_attached
    assert j.progress_record()["done"] == 2
    assert j.lease_text == str(j.lease_token)


def test_the_worker_side_is_not_writable_by_assignment():
    with pytest.raises(AttributeError):
        job().lease_until = 0.0
    with pytest.raises(AttributeError):
        job().cancel_requested = True
