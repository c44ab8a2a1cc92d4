"""A worker that cannot renew a lease stops trusting it by its own clock: the handler sees
`job.lease_lost` once the lease's length passed without a renewal, even while the database is
out of reach, and the run's outcome is discarded."""

import re
import threading
import time

import pytest
from django.db import connections, transaction

from django_pgjobs import JobStatus, enqueue
from django_pgjobs.models import Job
from tests.conftest import eventually
from tests.testapp.models import Effect, Execution

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 2.0


def test_a_lease_not_renewed_within_its_length_is_lost_by_the_workers_clock(
    start_worker, invariants
):
    """The test locks the job's row, so the worker's heartbeat waits on it and renews nothing
    (what a cut-off database does). Within the lease's length the handler sees
    `job.lease_lost` and returns, while the heartbeat is still stuck; once the row is free,
    the worker discards that run's outcome and the job completes on its second attempt."""
    job = enqueue("test.behave", {"do": "until_lease_lost", "seconds": 30})
    invariants.track(job.id)
    w = start_worker(
        "--concurrency",
        "1",
        "--lease",
        str(LEASE),
        "--reap-interval",
        "0.2",
        "--poll-interval",
        "0.2",
        "-v",
        "1",
    )
    eventually(
        lambda: Execution.objects.filter(job_id=job.id, attempt=1).exists(),
        message="attempt 1 started",
    )
    locked, release = threading.Event(), threading.Event()

    def hold_row_lock():  # the worker's heartbeat UPDATE waits for this transaction
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=job.id)
            locked.set()
            release.wait(30)
        connections.close_all()

    holder = threading.Thread(target=hold_row_lock)
    holder.start()
    try:
        assert locked.wait(10)
        since = time.monotonic()
        eventually(
            lambda: Effect.objects.filter(job_id=job.id).exists(),
            timeout=LEASE + 5,
            interval=0.05,
            message="the handler saw lease_lost while the row was locked",
        )
        noticed = time.monotonic() - since
    finally:
        release.set()
        holder.join(30)
    # The last renewal was at most a third of the lease before the lock, the claim's clock
    # starts before its round trip: noticed within the lease's length (plus scheduling).
    assert noticed <= LEASE + 1.0, noticed
    assert Effect.objects.get(job_id=job.id).value == "lease_lost=True"
    eventually(
        lambda: Job.objects.get(pk=job.id).status == JobStatus.COMPLETED,
        timeout=30,
        message="attempt 2 completed",
    )
    done = Job.objects.get(pk=job.id)
    assert done.attempts == 2 and done.result == {"did": "until_lease_lost", "attempt": 2}
    assert [h["outcome"] for h in done.history] == ["lease_expired"]
    out = w.output()
    assert re.search(rf"lease_lost test\.behave#{job.id}: outcome COMPLETED discarded", out), out
    w.signal(15)
    assert w.wait(timeout=30) == 0, out
    invariants.check(drained=True, min_lease=LEASE)
