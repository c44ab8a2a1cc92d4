"""A kill -9 of the worker holding a key's last slot (per-key limit 1), with real runjobs
processes: the slot is freed only when the dead worker's lease is reaped, and its stale
finalize, sent afterwards, changes nothing (docs/flow-control.md, guarantees.md)."""

from __future__ import annotations

import signal

import pytest

from django_pgjobs import JobStatus, enqueue, flow, queries
from django_pgjobs.models import Job, Queue
from django_pgjobs.queries import Completion, ControlledQueue
from tests.conftest import eventually
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--lease", "1", "--reap-interval", "0.2", "--poll-interval", "0.2", "-v", "1")
WORKER = (*FAST, "--queues", "crm", "--concurrency", "4")


def test_a_killed_holder_of_a_keys_last_slot_frees_it_at_the_reap_and_its_finalize_is_stale(
    start_worker,
):
    Queue.objects.create(name="crm", per_key_limit=1)
    held = enqueue("test.behave", {"do": "sleep", "seconds": 1.5}, queue="crm", flow_key="a")
    other = enqueue("test.behave", {"do": "ok"}, queue="crm", flow_key="a", priority=-1)
    first = start_worker(*WORKER)
    eventually(lambda: Execution.objects.filter(job_id=held.id).exists(), message="held runs")
    first.signal(signal.SIGKILL)
    first.wait()
    dead = Job.objects.get(pk=held.id)  # no heartbeat renews it now
    assert (dead.status, Job.objects.get(pk=other.id).status) == ("RUNNING", "PENDING")
    stale = Completion(
        id=dead.id, token=dead.lease_token, attempt=dead.attempts, status=JobStatus.COMPLETED
    )

    start_worker(*WORKER)
    eventually(
        lambda: Job.objects.filter(id__in=[held.id, other.id], status="COMPLETED").count() == 2,
        timeout=30,
        message="both jobs of the key completed after the reap",
    )
    runs = list(Execution.objects.filter(job_id__in=[held.id, other.id]).order_by("started_at"))
    assert [(r.job_id, r.attempt) for r in runs][0] == (held.id, 1)
    # the key's next run started once the dead run's lease had expired, never beside it
    assert all(r.started_at >= dead.lease_expires_at for r in runs[1:])
    for earlier, later in zip(runs[1:], runs[2:], strict=False):
        assert later.started_at >= earlier.finished_at  # one RUNNING per key at any time

    done = Job.objects.get(pk=held.id)
    assert (done.status, done.attempts) == (JobStatus.COMPLETED, 2)
    assert done.history[0]["outcome"] == "lease_expired"
    # the dead worker's outcome arrives late, alone or riding in a controlled claim: nothing
    assert queries.finalize([stale]) == set()
    written, _ = queries.finalize_and_claim_controlled(
        [stale],
        [ControlledQueue("crm", flow.FlowSettings())],
        worker_id="late",
        types=["test.behave"],
        limit=4,
        lease_seconds=30,
    )
    assert written == set()
    after = Job.objects.get(pk=held.id)
    assert (after.status, after.attempts, after.finished_at) == (
        done.status,
        done.attempts,
        done.finished_at,
    )
