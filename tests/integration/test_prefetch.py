"""Prefetch: a worker holds more claimed jobs than threads only while they all run short, and
gives back what waits behind runs that turned out long."""

import threading

import pytest

from django_pgjobs import JobStatus, enqueue, enqueue_many, handler, registry
from django_pgjobs.models import Job, Queue
from django_pgjobs.worker import Worker, WorkerOptions, loop
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
    worker = Worker(WorkerOptions.from_settings(
        listen=False, install_signal_handlers=False, scheduler=False, prune=False, **opts))
    worker.start()
    return worker


def settle(worker, n, *, short=True):
    """Wait until ``n`` claimed runs ended (and fed the handoff's run times). With ``short``,
    the type's typical run time is then set well under Handoff.short: a busy machine can stall
    a no-op run past 1 ms, and these tests are about what the claim does with short types."""
    eventually(lambda: worker._finished.qsize() >= n, timeout=10, message=f"{n} runs ended")
    if short:
        worker._work._typical["test.quick"] = 0.00001


@pytest.mark.parametrize(("prefetch", "config", "second_claim"), [
    (20, {}, 2 + 20),  # short runs: the free threads and the prefetch
    (0, {}, 2),  # prefetch off: one job per free thread
    (20, {"sleep": 0.005}, 2),  # 5 ms runs are not short: no prefetch
], ids=["short", "prefetch-0", "not-short"])
def test_a_claim_takes_more_than_the_free_threads_only_for_short_jobs(quick, prefetch, config,
                                                                      second_claim):
    enqueue_many("test.quick", [config] * 60)
    worker = started(concurrency=2, prefetch=prefetch, batch_size=100)
    try:
        assert worker.run_once() == 2  # a type never run here is not known to be short
        settle(worker, 2, short=not config)
        assert worker.run_once() == second_claim
        assert Job.objects.filter(status=JobStatus.RUNNING).count() <= second_claim
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
    monkeypatch.setattr(loop, "HOLD_MAX", 0.2)
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
        assert (running.filter(queue="capped").count(), running.exclude(queue="capped").count()) \
            == (2, 20)
    finally:
        worker.shutdown()
