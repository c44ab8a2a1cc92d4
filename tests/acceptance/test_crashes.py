"""Workers that die, get stopped in storms, or stall past their lease: nothing lost, no
completion overwritten, no orphan left behind."""

import random
import signal
import time
from datetime import datetime

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from django_pgjobs.worker.maintenance import Reaper
from tests.conftest import eventually, sql, sql_one
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 1.0
FAST = ("--lease", str(LEASE), "--reap-interval", "0.2", "--poll-interval", "0.2", "-v", "1")


def status(job_id):
    return Job.objects.get(pk=job_id).status


def ran(job_id, attempt=None):
    runs = Execution.objects.filter(job_id=job_id)
    return runs.filter(attempt=attempt).exists() if attempt else runs.exists()


def pgjobs_backends():
    return sql(
        "SELECT pid, application_name FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE 'pgjobs:%%'"
    )


def test_handler_exiting_hard_is_rescued_like_kill_9(start_worker, invariants):
    """os._exit() in a handler takes the process down without any cleanup; the job is reaped
    when its lease expires and completes on the next attempt, while other jobs keep flowing."""
    crash = enqueue("test.behave", {"do": "exit", "fail_times": 1}, priority=10)
    others = enqueue_many("test.behave", [{"do": "ok"}] * 5)
    invariants.track(crash.id, others)
    first = start_worker(*FAST, "--concurrency", "1")
    assert first.wait(timeout=60) == 17, first.output()
    assert status(crash.id) == JobStatus.RUNNING  # orphaned: nobody released it
    second = start_worker(*FAST, "--concurrency", "1")
    eventually(
        lambda: not Job.objects.filter(status__in=["PENDING", "RUNNING"]).exists(),
        timeout=30,
        message="queue drained after the rescue",
    )
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, second.output()
    crash.refresh_from_db()
    assert (crash.status, crash.attempts) == (JobStatus.COMPLETED, 2)
    assert [h["outcome"] for h in crash.history] == ["lease_expired"]
    assert "job.reaped" in second.output()
    invariants.check(drained=True, min_lease=LEASE)


def test_start_stop_storm_leaves_no_orphan_and_no_connection(start_worker, invariants):
    """Ten workers started at once, then SIGTERM or SIGKILL at random moments (during Django's
    start-up, mid-claim, mid-job): once leases expire and the reaper ran, nothing is RUNNING;
    no pgjobs connection outlives its process; a final worker drains everything exactly once."""
    ids = enqueue_many("test.behave", [{"do": "sleep", "seconds": 0.3}] * 40)
    invariants.track(ids)
    rng = random.Random(7)  # noqa: S311 - reproducible storm
    workers = [
        start_worker(*FAST, "--concurrency", "2", "--shutdown-timeout", "5") for _ in range(10)
    ]
    plan = sorted(
        (rng.uniform(0.0, 4.0), w, sig)
        for w, sig in zip(workers, [signal.SIGTERM, signal.SIGKILL] * 5, strict=True)
    )
    began = time.monotonic()
    for at, w, sig in plan:
        # time under test: each signal goes at its planned instant of the storm
        time.sleep(max(0.0, at - (time.monotonic() - began)))
        w.signal(sig)
    codes = {w.pid: w.wait(timeout=60) for w in workers}
    for _, w, sig in plan:
        allowed = {-signal.SIGKILL} if sig == signal.SIGKILL else {0, -signal.SIGTERM}
        assert codes[w.pid] in allowed, (sig, codes[w.pid], w.output()[-3000:])
    eventually(
        lambda: not pgjobs_backends(),
        timeout=10,
        message="every pgjobs connection closed after its worker exited",
    )

    def no_orphan():
        Reaper("default").run_once()  # what any live worker's reaper does
        return not Job.objects.filter(status=JobStatus.RUNNING).exists()

    eventually(no_orphan, timeout=LEASE + 10, interval=0.2, message="no RUNNING orphan")
    final = start_worker("--burst", "--concurrency", "2", "-v", "1")
    assert final.wait(timeout=60) == 0, final.output()
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY 1") == [("COMPLETED", 40)]
    eventually(lambda: not pgjobs_backends(), timeout=10, message="final worker disconnected")
    invariants.check(drained=True, min_lease=LEASE)


def test_stalled_worker_loses_its_lease_and_its_outcome_is_discarded(start_worker, invariants):
    """SIGSTOP freezes worker A (handler, heartbeat and all) past its lease. Worker B reaps the
    job, runs attempt 2 and completes it. When A wakes up, its finalize is refused (logged
    `job.lease_lost`) and the completed job never goes back to PENDING or RUNNING."""
    job = enqueue("test.behave", {"do": "sleep", "seconds": 1.0})
    invariants.track(job.id)
    a = start_worker(*FAST, "--concurrency", "1")
    eventually(lambda: ran(job.id, 1), message="A started attempt 1")
    a.signal(signal.SIGSTOP)
    try:
        b = start_worker(*FAST, "--concurrency", "1")
        eventually(
            lambda: status(job.id) == JobStatus.COMPLETED,
            timeout=30,
            message="B rescued and completed the job",
        )
        completed = Job.objects.get(pk=job.id)
    finally:
        a.signal(signal.SIGCONT)
    assert completed.attempts == 2 and completed.result == {"did": "sleep", "attempt": 2}
    eventually(
        lambda: "job.lease_lost" in a.output(), timeout=15, message="A noticed it lost the lease"
    )
    # A's late finalize, heartbeat and reaper have all run by now: the completion stands.
    eventually(
        lambda: (
            ran(job.id, 1)
            and Execution.objects.get(job_id=job.id, attempt=1).finished_at is not None
        ),
        message="A's stale run finished",
    )
    for w in (a, b):
        w.signal(signal.SIGTERM)
        assert w.wait(timeout=30) == 0, w.output()
    final = Job.objects.get(pk=job.id)
    assert (final.status, final.attempts, final.result, final.finished_at) == (
        JobStatus.COMPLETED,
        2,
        {"did": "sleep", "attempt": 2},
        completed.finished_at,
    )
    assert [h["outcome"] for h in final.history] == ["lease_expired"]
    assert "job.reaped" in b.output() + a.output()
    assert sql_one("SELECT count(*) FROM testapp_execution WHERE job_id = %s", [job.id]) == 2
    invariants.check(drained=True, min_lease=LEASE)


def test_sigterm_drain_keeps_heartbeating_so_no_one_reaps_the_running_job(start_worker, invariants):
    """After SIGTERM the worker stops claiming but its heartbeat keeps the running job's 1 s
    lease alive for the whole 3 s drain, while another worker reaps every 0.2 s."""
    job = enqueue("test.behave", {"do": "sleep", "seconds": 3.0}, priority=5)
    waiting = enqueue_many("test.behave", [{"do": "ok"}] * 3)
    invariants.track(job.id, waiting)
    draining = start_worker(*FAST, "--concurrency", "1", "--shutdown-timeout", "20")
    eventually(lambda: ran(job.id), message="long job started")
    draining.signal(signal.SIGTERM)
    reaper = start_worker(*FAST, "--concurrency", "1")
    assert draining.wait(timeout=30) == 0, draining.output()
    eventually(
        lambda: not Job.objects.filter(status__in=["PENDING", "RUNNING"]).exists(),
        timeout=20,
        message="the other worker ran the waiting jobs",
    )
    reaper.signal(signal.SIGTERM)
    assert reaper.wait(timeout=30) == 0, reaper.output()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.history) == (JobStatus.COMPLETED, 1, [])
    assert "job.reaped" not in reaper.output()
    assert Execution.objects.get(job_id=job.id).pid == draining.pid
    invariants.check(drained=True, min_lease=LEASE)


def _logged_at(output, fragment):
    line = next(ln for ln in output.splitlines() if fragment in ln)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_job_interrupted_at_the_shutdown_timeout_is_released_only_as_the_worker_exits(start_worker):
    """A handler still running at the shutdown timeout cannot be stopped, only abandoned. Its
    job is released (attempt refunded) as the worker's last step, so another worker can re-run
    it only once this process, and the abandoned handler with it, is about to be gone."""
    job = enqueue("test.behave", {"do": "sleep", "seconds": 30})
    w = start_worker("--concurrency", "1", "--shutdown-timeout", "0.3", "-v", "1")
    eventually(lambda: ran(job.id), message="job started")
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=20) == 0, w.output()
    released = _logged_at(w.output(), "still running after the shutdown timeout")
    stopped = _logged_at(w.output(), "stopped:")
    assert 0 <= stopped - released < 0.5, w.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)


def test_job_finishing_after_the_shutdown_timeout_but_before_exit_is_recorded(
    start_worker, invariants
):
    """The handler outlives the 0.3 s shutdown timeout but returns while the worker still waits
    for its threads: its completion is written, not lost to a reaper later."""
    job = enqueue("test.behave", {"do": "sleep", "seconds": 1.0})
    invariants.track(job.id)
    w = start_worker("--concurrency", "1", "--shutdown-timeout", "0.3", "-v", "1")
    eventually(lambda: ran(job.id), message="job started")
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=20) == 0, w.output()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.lease_token) == (JobStatus.COMPLETED, 1, None), w.output()
    invariants.check(drained=True)
