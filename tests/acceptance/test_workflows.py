"""Workflows under real workers killed with SIGKILL at random moments: every callback runs
(once per attempt, after every member finished), none is lost, and the edges add up."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_pgjobs import Batch, JobStatus, chord
from django_pgjobs.models import Job
from django_pgjobs.models import Worker as WorkerRow
from django_pgjobs.worker.maintenance import Reaper
from tests.conftest import eventually, sql
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 1.0
FAST = ("--lease", str(LEASE), "--reap-interval", "0.2", "--poll-interval", "0.2", "-v", "0")
MEMBERS = 1500


def settled() -> bool:
    return not Job.objects.filter(status__in=["WAITING", "PENDING", "RUNNING"]).exists()


def busy(workers: list) -> object | None:
    """A worker holding a RUNNING job right now (worker ids are host:pid:suffix)."""
    holders = {
        int(w.split(":")[1])
        for w in Job.objects.filter(status=JobStatus.RUNNING).values_list("locked_by", flat=True)
        if w and w.count(":") >= 2 and w.split(":")[1].isdigit()
    }
    return next((w for w in workers if w.pid in holders), None)


def started(worker) -> bool:
    """The worker wrote its row: its signal handlers are installed (Worker.start comes first)."""
    return WorkerRow.objects.filter(worker_id__contains=f":{worker.pid}:").exists()


def test_group_callbacks_survive_kill_9_of_workers(start_worker, invariants):
    ok = chord(
        [("test.behave", {"do": "ok", "i": i}) for i in range(MEMBERS)],
        ("test.behave", {"do": "ok", "callback": True}),
        name="wide",
    ).enqueue()
    members = [("test.behave", {"do": "ok"})] * 200 + [("test.behave", {"do": "fail"})]
    batch = Batch(
        members,
        on_success=("test.behave", {"do": "ok"}),
        on_failure=("test.behave", {"do": "ok"}),
        on_complete=("test.behave", {"do": "ok"}),
    ).enqueue()
    invariants.track(*ok.steps.values(), *batch.steps.values())
    rng = random.Random(29)  # noqa: S311 - reproducible kills
    workers = [start_worker(*FAST, "--concurrency", "4") for _ in range(4)]
    eventually(Execution.objects.exists, timeout=60, message="the workers run members")
    for _ in range(4):  # each kill takes down a worker in the middle of runs
        time.sleep(rng.uniform(0.1, 1.0))
        victim = busy(workers) or workers[rng.randrange(len(workers))]
        workers.remove(victim)
        victim.signal(signal.SIGKILL)
        assert victim.wait(timeout=30) == -signal.SIGKILL
        workers.append(start_worker(*FAST, "--concurrency", "4"))

    def drained() -> bool:
        Reaper("default").run_once()  # what any live worker's reaper does
        return settled()

    eventually(drained, timeout=180, interval=0.5, message="every workflow settled")
    for w in workers:  # a replacement still starting has no SIGTERM handler yet: its row says
        eventually(lambda w=w: started(w), timeout=60, message="the worker started")
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(timeout=30) == 0, w.output()[-3000:]

    callback = Job.objects.get(pk=ok["callback"][0])
    assert callback.status == JobStatus.COMPLETED, (callback.status, callback.error)
    last_member = sql("SELECT max(finished_at) FROM pgjobs_job WHERE id = ANY(%s)", [ok["header"]])
    runs = Execution.objects.filter(job_id=callback.id)
    assert runs.count() == callback.attempts  # once per attempt (unique (job, attempt))
    assert min(r.started_at for r in runs) >= last_member[0][0]
    statuses = {s: Job.objects.get(pk=batch[s][0]).status for s in batch.steps if s != "batch"}
    assert statuses == {
        "on_success": JobStatus.CANCELLED,
        "on_failure": JobStatus.COMPLETED,
        "on_complete": JobStatus.COMPLETED,
    }
    reaped = sql("SELECT count(*) FROM pgjobs_job WHERE history::text LIKE '%%lease_expired%%'")
    assert reaped[0][0] > 0, "no kill hit a running job: the scenario proved nothing"
    invariants.check(drained=True, min_lease=LEASE)
