"""Real runjobs subprocesses, real signals, real crashes."""

import signal
import time

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from django_pgjobs.worker import Worker, WorkerOptions
from tests.conftest import eventually, leases_expired, sql, sql_one
from tests.testapp.models import Execution

from .tcp_proxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--lease", "1", "--reap-interval", "0.2", "--poll-interval", "0.2", "-v", "1")


def status(job):
    return Job.objects.get(pk=job.id).status


def test_kill_9_mid_job_is_rescued_and_completes(start_worker, invariants):
    job = enqueue("test.behave", {"do": "sleep", "seconds": 1.5})
    invariants.track(job.id)
    first = start_worker(*FAST)
    eventually(lambda: Execution.objects.filter(job_id=job.id).exists(), message="job started")
    first.signal(signal.SIGKILL)
    first.wait()
    assert status(job) == JobStatus.RUNNING  # orphaned, lease still valid
    second = start_worker(*FAST)
    eventually(lambda: status(job) == JobStatus.COMPLETED, timeout=20, message="rescued")
    job.refresh_from_db()
    assert job.attempts == 2
    assert job.history[0]["outcome"] == "lease_expired"
    runs = list(Execution.objects.filter(job_id=job.id).order_by("attempt"))
    assert [r.attempt for r in runs] == [1, 2]
    assert runs[0].finished_at is None and runs[1].finished_at is not None
    assert runs[1].pid == second.pid
    invariants.check(drained=True, min_lease=1)


def test_poison_job_fails_after_max_attempts_while_others_flow(start_worker, invariants):
    poison = enqueue("test.behave", {"do": "kill"}, priority=10)
    others = enqueue_many("test.behave", [{"do": "ok"}] * 20)
    invariants.track(poison.id, others)
    deaths = 0
    for _ in range(8):  # a supervisor restarting the worker each time it dies
        w = start_worker(*FAST, "--concurrency", "1", "--burst")
        code = w.wait(timeout=60)
        if code == -signal.SIGKILL:
            deaths += 1
        if (
            status(poison) == JobStatus.FAILED
            and not Job.objects.filter(status__in=["PENDING", "RUNNING"]).exists()
        ):
            break
        eventually(leases_expired, timeout=10, message="the dead worker's lease expired")
    poison.refresh_from_db()
    assert poison.status == JobStatus.FAILED and poison.attempts == 3
    assert "lease expired" in poison.error
    assert deaths == 3
    assert Job.objects.filter(id__in=others, status=JobStatus.COMPLETED).count() == 20
    invariants.check(drained=True, min_lease=1)


def test_sigterm_lets_the_running_job_finish_and_exits_0(start_worker, invariants):
    running = enqueue("test.behave", {"do": "sleep", "seconds": 1.0}, priority=5)
    waiting = enqueue_many("test.behave", [{"do": "ok"}] * 5)
    invariants.track(running.id, waiting)
    w = start_worker("--concurrency", "1", "--shutdown-timeout", "20", "-v", "1")
    eventually(lambda: Execution.objects.filter(job_id=running.id).exists())
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0, w.output()
    running.refresh_from_db()
    assert running.status == JobStatus.COMPLETED
    left = Job.objects.filter(id__in=waiting)
    assert {(j.status, j.attempts) for j in left} == {(JobStatus.PENDING, 0)}
    assert "received SIGTERM" in w.output()
    assert not sql_one("SELECT count(*) FROM pgjobs_worker")
    invariants.check(drained=False)


def test_shutdown_timeout_releases_the_job_with_its_attempt_refunded(start_worker, invariants):
    job = enqueue("test.behave", {"do": "sleep", "seconds": 30})
    invariants.track(job.id)
    w = start_worker("--concurrency", "1", "--shutdown-timeout", "0.5")
    eventually(lambda: Execution.objects.filter(job_id=job.id).exists())
    started = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=20) == 0
    assert time.monotonic() - started < 10
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
    assert job.history[-1]["outcome"] == "released"
    assert "shutdown timeout" in job.history[-1]["error"]
    invariants.check(drained=False)


def test_second_signal_releases_the_running_job_and_exits_at_once(start_worker, invariants):
    """Ctrl-C twice: the job it runs goes back to PENDING at once (attempt refunded, as at the
    shutdown timeout), not RUNNING until its lease expires; its completion is never recorded."""
    job = enqueue("test.behave", {"do": "sleep", "seconds": 30})
    invariants.track(job.id)
    w = start_worker("--concurrency", "1", "--shutdown-timeout", "60")
    eventually(lambda: Execution.objects.filter(job_id=job.id).exists())
    w.signal(signal.SIGTERM)
    eventually(lambda: "send it again" in w.output(), message="the first signal handled")
    sent = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 128 + signal.SIGTERM, w.output()[-3000:]
    assert time.monotonic() - sent < 5, w.output()[-3000:]
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0), w.output()[-3000:]
    assert job.history[-1]["outcome"] == "released"
    assert "received SIGTERM twice" in job.history[-1]["error"]
    assert "released 1 of the 1 jobs this worker held" in w.output()
    invariants.check(drained=False)


@pytest.mark.parametrize("fault", ["stop", "freeze"], ids=["refused", "silent"])
def test_second_signal_exits_promptly_with_the_database_unreachable(start_worker, fault):
    """Where the release cannot reach the database (refused, or never answering) the worker
    exits anyway, within ~2 s; the job waits for the reaper (its lease)."""
    proxy = TcpProxy.to_test_database()
    try:
        job = enqueue("test.behave", {"do": "sleep", "seconds": 30})
        w = start_worker(
            "--concurrency", "1", "--shutdown-timeout", "60", env={"DATABASE_URL": proxy.url()}
        )
        eventually(lambda: Execution.objects.filter(job_id=job.id).exists())
        getattr(proxy, fault)()
        w.signal(signal.SIGTERM)
        eventually(lambda: "send it again" in w.output(), message="the first signal handled")
        sent = time.monotonic()
        w.signal(signal.SIGTERM)
        assert w.wait(timeout=10) == 128 + signal.SIGTERM, w.output()[-3000:]
        assert time.monotonic() - sent < 5, w.output()[-3000:]
    finally:
        proxy.stop()
    assert "could not release" in w.output(), w.output()[-3000:]
    assert status(job) == JobStatus.RUNNING  # the reaper rescues it once the lease expires


def test_unstarted_jobs_are_released_at_once_with_attempts_refunded():
    """Jobs claimed but not yet handed to a thread go back to PENDING, attempt refunded."""
    enqueue_many("test.noop", [{}] * 3)
    worker = Worker(
        WorkerOptions.from_settings(concurrency=3, listen=False, install_signal_handlers=False)
    )
    worker.producer.types = ["test.noop"]  # claim without starting executor threads
    assert worker.cycle() == 3
    assert sql_one("SELECT count(*) FROM pgjobs_job WHERE status='RUNNING' AND attempts=1") == 3
    worker.shutdown()
    assert sql("SELECT status, attempts, count(*) FROM pgjobs_job GROUP BY 1, 2") == [
        ("PENDING", 0, 3)
    ]


def _backend_pids(worker, role):
    """This worker's connections (other test runs share the server: never touch theirs)."""
    return [
        r[0]
        for r in sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name LIKE %s",
            [f"pgjobs:%:{worker.pid}:%:{role}"],
        )
    ]


def _terminate(worker, role):
    for pid in _backend_pids(worker, role):
        sql("SELECT pg_terminate_backend(%s)", [pid])


def test_worker_survives_termination_of_its_connections(start_worker):
    w = start_worker("--poll-interval", "30", "--concurrency", "1", "-v", "1")
    eventually(lambda: _backend_pids(w, "listen") and _backend_pids(w, "main"), message="connected")
    # Kill the main connection while idle: the next step reconnects.
    _terminate(w, "main")
    # Kill the LISTEN connection: it reconnects, and NOTIFY wakes the worker again.
    old_listen = _backend_pids(w, "listen")
    _terminate(w, "listen")
    eventually(
        lambda: _backend_pids(w, "listen") and _backend_pids(w, "listen") != old_listen,
        timeout=15,
        message="listener back",
    )
    job = enqueue("test.behave", {"do": "ok"})
    # Poll interval is 30 s: finishing within 10 s proves the NOTIFY path works again.
    eventually(lambda: status(job) == JobStatus.COMPLETED, timeout=10, message="woken by NOTIFY")
    assert w.proc.poll() is None
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0
    assert "listener connection lost" in w.output()


def test_handler_that_breaks_its_own_connection(start_worker, invariants):
    bad = enqueue("test.behave", {"do": "break_connection"})
    good = enqueue("test.behave", {"do": "ok"})
    invariants.track(bad.id, good.id)
    w = start_worker("--burst", "--concurrency", "1")
    assert w.wait(timeout=60) == 0, w.output()
    assert status(good) == JobStatus.COMPLETED
    bad.refresh_from_db()
    # Retried (backoff 0.05 s: a burst worker may have run it again before it found no work).
    assert bad.status in (JobStatus.PENDING, JobStatus.FAILED) and bad.attempts >= 1 and bad.error
    invariants.check(drained=False)
