"""A worker whose wall clock is an hour off (libfaketime, Debian package `faketime`) behaves
exactly like one on time: every lease, reap, backoff and due-time comparison is made against
the database clock, never the worker's.

(FAKETIME_DONT_FAKE_MONOTONIC=1: a wrong wall clock, a sane monotonic one. libfaketime 0.9.10
then breaks time.sleep() with EINVAL, so the slow job here waits on an Event instead.)

A worker clock +1 h ahead that trusted itself would reap live leases and run jobs due in 30 min;
one -1 h behind would never reap a dead worker's job and would write leases that are already
expired. Neither happens.
"""

import glob
import shutil
import signal
from datetime import timedelta

import pytest

from django_pgjobs import JobStatus, enqueue, queries
from django_pgjobs.models import Job
from tests.conftest import eventually, missing_requirement, sql, sql_one
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 1.0


def faketime_library() -> str:
    libs = sorted(
        glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
        + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1")
    )
    if shutil.which("faketime") and libs:
        return libs[0]
    missing_requirement(
        "libfaketime (for the clock-skew scenarios)", "apt-get install faketime (Debian/Ubuntu)"
    )
    raise AssertionError("unreachable")


def claimed_by_someone_else(job_type, config, lease_seconds):
    job = enqueue(job_type, config, priority=100)
    (row,) = queries.claim(
        worker_id="elsewhere:1:abc",
        types=[job_type],
        queues=None,
        limit=1,
        lease_seconds=lease_seconds,
    )
    assert row.id == job.id
    return job.id, row.lease_token


@pytest.mark.parametrize("skew", ["+1h", "-1h"])
def test_a_worker_an_hour_off_neither_reaps_early_nor_misschedules(start_worker, invariants, skew):
    library = faketime_library()
    # Another worker holds a live 60 s lease; a dead one left a lease that expired 1 s ago.
    live, live_token = claimed_by_someone_else("test.noop", {}, lease_seconds=60)
    dead, _ = claimed_by_someone_else("test.behave", {"do": "ok"}, lease_seconds=60)
    sql(
        "UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [dead]
    )
    long_run = enqueue("test.behave", {"do": "block", "seconds": 1.5})  # outlives 1 s leases
    failing = enqueue("test.behave", {"do": "raise"})  # 3 attempts, 0.05-0.2 s apart
    later = enqueue("test.behave", {"do": "retry", "seconds": 300})
    future = enqueue("test.behave", {"do": "ok"}, run_after=timedelta(minutes=30))
    invariants.track(live, dead, long_run.id, failing.id, later.id, future.id)

    w = start_worker(
        "--lease",
        str(LEASE),
        "--reap-interval",
        "0.2",
        "--poll-interval",
        "0.2",
        "--concurrency",
        "3",
        "-v",
        "1",
        env={"LD_PRELOAD": library, "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1"},
    )

    def settled():
        return {
            j.id: (j.status, j.attempts)
            for j in Job.objects.filter(id__in=[dead, long_run.id, failing.id, later.id])
        } == {
            dead: (JobStatus.COMPLETED, 2),
            long_run.id: (JobStatus.COMPLETED, 1),
            failing.id: (JobStatus.FAILED, 3),
            later.id: (JobStatus.PENDING, 1),
        }

    eventually(settled, timeout=30, message="dead job rescued, others settled")
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0, w.output()

    # The skew is real: the handler's own timestamps (Python's clock) are an hour off.
    offset = sql_one(
        "SELECT extract(epoch FROM started_at - now()) FROM testapp_execution WHERE job_id = %s",
        [long_run.id],
    )
    assert abs(abs(float(offset)) - 3600) < 120, offset
    # Not reaped early: the live lease is untouched, and the worker's own 1.5 s run survived
    # its 1 s lease thanks to heartbeats computed on the database clock.
    held = Job.objects.get(pk=live)
    assert (held.status, str(held.lease_token), held.locked_by) == (
        JobStatus.RUNNING,
        live_token,
        "elsewhere:1:abc",
    )
    assert f"#{live}" not in w.output() and f"test.behave#{long_run.id}: lease" not in w.output()
    assert Execution.objects.filter(job_id=long_run.id).count() == 1
    # Reaped on time although, by its own clock, the dead lease may not have expired yet.
    assert Job.objects.get(pk=dead).history[0]["outcome"] == "lease_expired"
    # Backoff scheduled on the database clock: retries came 0.05-0.2 s apart, not an hour.
    starts = sql(
        "SELECT (h->>'started_at')::timestamptz FROM pgjobs_job, "
        "jsonb_array_elements(history) h WHERE id = %s ORDER BY 1",
        [failing.id],
    )
    gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    assert len(gaps) == 2 and all(0 < g < 10 for g in gaps), gaps
    wait = sql_one(
        "SELECT extract(epoch FROM run_after - updated_at) FROM pgjobs_job WHERE id = %s",
        [later.id],
    )
    assert abs(float(wait) - 300) < 2, wait
    # Not run early: due in 30 min by the database clock.
    assert Job.objects.get(pk=future.id).attempts == 0
    # (Execution times are on the skewed clock: the overlap check cannot compare them.)
    invariants.check(drained=True, timing=False, still_pending=[live, later.id, future.id])
