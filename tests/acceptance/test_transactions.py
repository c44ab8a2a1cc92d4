"""Transactions seen by a real worker process: a job exists for it only once committed; a
rolled-back savepoint takes its jobs along; transactional completion commits the handler's
writes and the job's completion together, whatever moment a kill -9 lands."""

import random
import signal
import threading
import time

import pytest
from django.db import connections, transaction

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from tests.conftest import eventually, leases_expired, sql, sql_one
from tests.testapp.models import Effect, Execution

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 1.0
FAST = ("--lease", str(LEASE), "--reap-interval", "0.2", "--poll-interval", "0.2", "-v", "1")
# Poll every 30 s: a job done within seconds was woken by NOTIFY, i.e. by a commit.
NOTIFY_ONLY = ("--poll-interval", "30", "--concurrency", "1", "-v", "1")


def listening(worker):
    """The worker sleeps, listening with the doorbell armed (an enqueue from now on rings)."""
    return sql_one(
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l USING (pid) "
        "WHERE a.datname = current_database() AND a.application_name LIKE %s "
        "AND l.locktype = 'advisory' AND l.mode = 'ShareLock' AND l.granted",
        [f"pgjobs:%:{worker.pid}:%"],
    )


def committed_elsewhere(job_type, config, **kwargs):
    """Enqueue and commit on another connection while this one holds a transaction open."""
    box = {}

    def run():
        try:
            box["id"] = enqueue(job_type, config, **kwargs).id
        finally:
            connections.close_all()

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    return box["id"]


def up(worker):
    return "started: queues=" in worker.output()


def status(job_id):
    return Job.objects.get(pk=job_id).status


def test_uncommitted_job_is_invisible_to_a_worker_until_commit(start_worker, invariants):
    """A sentinel committed after the open transaction's job, with a lower priority, is run
    while that job is not: proof the worker's claim could not see it. On commit, NOTIFY wakes
    the worker and the job runs."""
    w = start_worker(*NOTIFY_ONLY)
    eventually(lambda: listening(w), message="worker listening")
    with transaction.atomic():
        hidden = enqueue("test.behave", {"do": "ok"}, priority=50)
        sentinel = committed_elsewhere("test.behave", {"do": "ok"}, priority=-50)
        eventually(
            lambda: status(sentinel) == JobStatus.COMPLETED, timeout=15, message="sentinel run"
        )
        assert not Execution.objects.filter(job_id=hidden.id).exists()
    eventually(
        lambda: status(hidden.id) == JobStatus.COMPLETED,
        timeout=10,
        message="job run once committed (woken by NOTIFY)",
    )
    invariants.track(hidden.id, sentinel)
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0, w.output()
    invariants.check(drained=True)


def test_rolled_back_job_never_runs(start_worker, invariants):
    w = start_worker(*NOTIFY_ONLY)
    eventually(lambda: listening(w), message="worker listening")
    with pytest.raises(RuntimeError), transaction.atomic():
        gone = enqueue("test.behave", {"do": "ok"}, priority=50)
        raise RuntimeError("the request failed")
    sentinel = enqueue("test.behave", {"do": "ok"}, priority=-50)
    eventually(
        lambda: status(sentinel.id) == JobStatus.COMPLETED, timeout=15, message="sentinel run"
    )
    assert not Job.objects.filter(pk=gone.id).exists()
    assert not Execution.objects.filter(job_id=gone.id).exists()
    invariants.track(sentinel.id)
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0, w.output()
    invariants.check(drained=True)


def test_savepoint_rollback_drops_only_its_jobs_and_the_commit_wakes_the_worker(
    start_worker, invariants
):
    w = start_worker(*NOTIFY_ONLY)
    eventually(lambda: listening(w), message="worker listening")
    with transaction.atomic():
        kept = enqueue("test.behave", {"do": "ok"})
        try:
            with transaction.atomic():
                dropped = enqueue("test.behave", {"do": "ok"}, queue="other")
                dropped_many = enqueue_many("test.behave", [{"do": "ok"}] * 3)
                raise RuntimeError("inner step failed")
        except RuntimeError:
            pass
    eventually(
        lambda: status(kept.id) == JobStatus.COMPLETED,
        timeout=10,
        message="kept job run, woken by the outer commit's NOTIFY",
    )
    gone = [dropped.id, *dropped_many]
    assert not Job.objects.filter(pk__in=gone).exists()
    assert not Execution.objects.filter(job_id__in=gone).exists()
    invariants.track(kept.id)
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0, w.output()
    invariants.check(drained=True)


# --- opt-in transactional completion (@handler(..., transactional=True)) ----------------------


def effects_match_completions(ids):
    """COMPLETED <=> exactly one effect; anything else <=> none. Returns the mismatches."""
    return sql(
        "SELECT j.id, j.status, count(e.id) FROM pgjobs_job j "
        "LEFT JOIN testapp_effect e ON e.job_id = j.id WHERE j.id = ANY(%s) GROUP BY j.id "
        "HAVING count(e.id) <> CASE WHEN j.status = 'COMPLETED' THEN 1 ELSE 0 END",
        [ids],
    )


def test_kill_9_inside_the_handler_transaction_leaves_no_effect(start_worker, invariants):
    job = enqueue("test.tx", {"value": "a", "kill_times": 1}, max_attempts=3)
    invariants.track(job.id)
    first = start_worker(*FAST, "--concurrency", "1")
    assert first.wait(timeout=60) == -signal.SIGKILL, first.output()
    assert status(job.id) == JobStatus.RUNNING
    assert not Effect.objects.filter(job_id=job.id).exists()  # written, never committed
    second = start_worker(*FAST, "--concurrency", "1")
    eventually(lambda: status(job.id) == JobStatus.COMPLETED, timeout=20, message="rescued")
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, second.output()
    assert list(Effect.objects.filter(job_id=job.id).values_list("value", flat=True)) == ["a"]
    assert Job.objects.get(pk=job.id).attempts == 2
    invariants.check(drained=True, min_lease=LEASE)


def test_kill_9_at_random_moments_never_splits_effect_from_completion(start_worker, invariants):
    """Workers are killed at random moments while transactional jobs write (before, during and
    after the commit). After every kill each job has its effect iff it is COMPLETED; once the
    queue is drained every job has exactly one effect."""
    ids = enqueue_many(
        "test.tx", [{"value": str(i), "sleep": 0.25} for i in range(12)], max_attempts=20
    )
    invariants.track(ids)
    rng = random.Random(11)  # noqa: S311 - reproducible kill moments
    kills = 0
    for _ in range(4):
        w = start_worker(*FAST, "--concurrency", "3")
        eventually(lambda w=w: up(w), timeout=30, message="worker up")
        time.sleep(rng.uniform(0.05, 0.6))  # time under test: a random moment of the run
        w.signal(signal.SIGKILL)
        w.wait(timeout=30)
        kills += 1
        assert effects_match_completions(ids) == []
        if not Job.objects.filter(id__in=ids).exclude(status=JobStatus.COMPLETED).exists():
            break
        eventually(leases_expired, timeout=10, message="the dead worker's leases expired")
    final = start_worker(*FAST, "--concurrency", "3")
    eventually(lambda: up(final), timeout=30, message="final worker up")
    eventually(
        lambda: not Job.objects.filter(id__in=ids).exclude(status=JobStatus.COMPLETED).exists(),
        timeout=30,
        message="all completed",
    )
    final.signal(signal.SIGTERM)
    assert final.wait(timeout=30) == 0, final.output()
    assert effects_match_completions(ids) == []
    assert sql_one("SELECT count(*) FROM testapp_effect") == 12
    assert kills >= 1
    invariants.check(drained=True, min_lease=LEASE)
