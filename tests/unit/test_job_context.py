"""JobContext's worker side: the one interface through which the worker changes a running job."""

import time

import pytest

from tests.testapp.contexts import job_context


def job(**kwargs):
    return job_context(**kwargs)


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
