"""Prefetch: a worker holds more claimed jobs than threads only while they all run short, and
gives back what waits behind runs that turned out long."""

import threading

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many, handler, registry
from django_pgjobs.models import Job, Queue
from django_pgjobs.worker import Worker, WorkerOptions, producer
from tests.conftest import eventually, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


class Gate:
    def __init__(self):
        self.open = threading.Event()
        self.blocked = threading.Event()  # a blocking job is running


@pytest.fixture
def quick():
    """``test.quick``: returns at once, unless its config says to block (until the gate opens)
    or to sleep."""
    gate = Gate()

    @handler("test.quick")
    def run(job):
        if job.config.get("block"):
            gate.blocked.set()
            assert gate.open.wait(20)
        if job.config.get("sleep"):
            gate.open.wait(job.config["sleep"])

    yield gate
    gate.open.set()
    registry.unregister("test.quick")


def started(**opts):
    worker = Worker(
        WorkerOptions.from_settings(
            listen=False, install_signal_handlers=False, scheduler=False, prune=False, **opts
        )
    )
    worker.start()
    return worker


def settle(worker, n, *, short=True):
    """Wait until ``n`` claimed runs ended (and fed the handoff's run times). With ``short``,
    the type's typical run time is then set well under Handoff.short: a busy machine can stall
    a no-op run past 1 ms, and these tests are about what the claim does with short types."""
    eventually(lambda: worker.completer.waiting() >= n, timeout=10, message=f"{n} runs ended")
    if short:
        worker.handoff._typical["test.quick"] = 0.00001


@pytest.mark.parametrize(
    ("prefetch", "config", "second_claim"),
    [
        (20, {}, 2 + 20),  # short runs: the free threads and the prefetch
        (0, {}, 2),  # prefetch off: one job per free thread
        (20, {"sleep": 0.005}, 2),  # 5 ms runs are not short: no prefetch
    ],
    ids=["short", "prefetch-0", "not-short"],
)
def test_a_claim_takes_more_than_the_free_threads_only_for_short_jobs(
    quick, prefetch, config, second_claim
):
    enqueue_many("test.quick", [config] * 60)
    worker = started(concurrency=2, prefetch=prefetch, batch_size=100)
    try:
        assert worker.run_once() == 2  # a type never run here is not known to be short
        settle(worker, 2, short=not config)
        assert worker.run_once() == second_claim
        assert (
            Job.objects.filter(status=JobStatus.RUNNING).count() == second_claim
        )  # not yet finalized
    finally:
        worker.shutdown()
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 0  # unstarted: released


def test_the_batch_size_still_caps_a_claim(quick):
    enqueue_many("test.quick", [{}] * 60)
    worker = started(concurrency=2, prefetch=100, batch_size=15)
    try:
        assert worker.run_once() == 2
        settle(worker, 2)
        assert worker.run_once() == 15
    finally:
        worker.shutdown()


def test_prefetched_jobs_stuck_behind_a_long_run_are_given_back(quick, monkeypatch):
    monkeypatch.setattr(producer, "HOLD_MAX", 0.2)
    warm = enqueue("test.quick", {})
    worker = started(concurrency=1, prefetch=5)
    try:
        assert worker.run_once() == 1
        settle(worker, 1)
        stuck = enqueue("test.quick", {"block": True}, priority=5)  # claimed first
        held = enqueue_many("test.quick", [{}] * 5)
        assert worker.run_once() == 6  # the short type's prefetch: one thread, five waiting
        assert quick.blocked.wait(10)
        assert Job.objects.filter(id__in=held, status=JobStatus.RUNNING).count() == 5
        threading.Event().wait(0.3)  # nobody takes a job for longer than HOLD_MAX
        assert worker.run_once() == 0  # releases them, and claims nothing back: no free thread
        rows = Job.objects.filter(id__in=held)
        assert {(j.status, j.attempts) for j in rows} == {(JobStatus.PENDING, 0)}
        assert {j.history[-1]["outcome"] for j in rows} == {"released"}
        assert Job.objects.get(pk=stuck.id).status == JobStatus.RUNNING
        quick.open.set()
        settle(worker, 1)
    finally:
        quick.open.set()
        worker.shutdown()
    run_worker()  # what was given back is claimed again, and runs once
    assert {(j.status, j.attempts) for j in Job.objects.all()} == {(JobStatus.COMPLETED, 1)}
    assert Job.objects.get(pk=warm.id).status == JobStatus.COMPLETED


def _stuck_with_five_held(quick):
    """A worker with one thread, stuck in a blocking job, holding five prefetched ones."""
    enqueue("test.quick", {})
    worker = started(concurrency=1, prefetch=5, shutdown_timeout=0.2)
    assert worker.run_once() == 1
    settle(worker, 1)
    enqueue("test.quick", {"block": True}, priority=5)
    held = enqueue_many("test.quick", [{}] * 5)
    assert worker.run_once() == 6
    assert quick.blocked.wait(10)
    return worker, held


def _fail_once(monkeypatch):
    from django.db import OperationalError

    from django_pgjobs import queries

    real, calls = queries.release, []

    def release(*args, **kwargs):
        calls.append(kwargs["reason"])
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real(*args, **kwargs)

    monkeypatch.setattr(queries, "release", release)
    return calls


def test_held_jobs_whose_release_fails_stay_queued_and_are_released_later(quick, monkeypatch):
    monkeypatch.setattr(producer, "HOLD_MAX", 0.2)
    worker, held = _stuck_with_five_held(quick)
    try:
        calls = _fail_once(monkeypatch)
        threading.Event().wait(0.3)
        assert worker.run_once() == 0  # the release fails: the loop backs off
        assert len(calls) == 1 and worker.guard.policy.backoff > 0
        assert Job.objects.filter(id__in=held, status=JobStatus.RUNNING).count() == 5
        assert [i.job.id for _, i in worker.handoff._items] == held  # queued again, in order
        threading.Event().wait(0.3)  # requeued counts as moved: another HOLD_MAX
        worker.run_once()
        assert len(calls) == 2
        assert Job.objects.filter(id__in=held, status=JobStatus.PENDING).count() == 5
    finally:
        quick.open.set()
        worker.shutdown()


def test_shutdown_retries_a_failed_release_of_unstarted_jobs(quick, monkeypatch):
    """A failed release must leave the jobs ours and unstarted, so that the retry gives them
    back (before, they stayed RUNNING until their lease expired, attempt counted)."""
    worker, held = _stuck_with_five_held(quick)
    calls = _fail_once(monkeypatch)
    try:
        worker.shutdown()
    finally:
        quick.open.set()
    assert calls[:2] == ["released unstarted at worker shutdown"] * 2
    assert {(j.status, j.attempts) for j in Job.objects.filter(id__in=held)} == {
        (JobStatus.PENDING, 0)
    }


def test_a_capped_queue_is_claimed_for_free_threads_only(quick):
    Queue.objects.create(name="capped", concurrency_limit=50)
    enqueue_many("test.quick", [{}] * 30, queue="capped")
    enqueue_many("test.quick", [{}] * 30)
    worker = started(concurrency=2, prefetch=20)
    try:
        assert worker.run_once() == 2  # capped queues first
        settle(worker, 2)
        assert worker.run_once() == 2 + 20  # short: the prefetch, from the uncapped queue only
        running = Job.objects.filter(status=JobStatus.RUNNING)
        assert (
            running.filter(queue="capped").count(),
            running.exclude(queue="capped").count(),
        ) == (2, 20)
    finally:
        worker.shutdown()
