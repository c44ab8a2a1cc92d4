"""The contracts of Completer, LeaseKeeper and StepGuard against a real database, without a
worker: jobs are claimed with the worker's own statement and handed to the part under test."""

import logging
import time

import pytest

from django_pgjobs import JobStatus, enqueue, queries, registry, rollup, signals
from django_pgjobs.models import Job
from django_pgjobs.models import Worker as WorkerRow
from django_pgjobs.queries import Completion
from django_pgjobs.worker.completer import Completer
from django_pgjobs.worker.guard import StepGuard
from django_pgjobs.worker.leases import LeaseKeeper
from django_pgjobs.worker.options import WorkerOptions
from django_pgjobs.worker.producer import job_context
from django_pgjobs.worker.run_state import RunState
from django_pgjobs.worker.slots import QUEUED, RELEASED, InFlight, Slots
from tests.conftest import sql
from tests.testapp.leases import steal_lease

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 30.0


def claim(
    n: int, slots: Slots, lease_for: float = LEASE, deadline: float | None = None
) -> list[InFlight]:
    """Enqueue ``n`` test.noop jobs and claim them as the worker would; by our clock their
    leases hold for ``lease_for`` seconds (less than the lease: a beat missed)."""
    for i in range(n):
        enqueue("test.noop", {"i": i})
    sent = time.monotonic()
    rows = queries.claim(
        worker_id="parts", types=["test.noop"], queues=None, limit=n, lease_seconds=LEASE
    )
    spec = registry.get("test.noop")
    items = []
    for row in rows:
        job = job_context(row, "parts", sent + lease_for)
        items.append(InFlight(job, spec, deadline=deadline))
    slots.add(items)
    assert len(items) == n
    return items


def done(item: InFlight, **fields) -> Completion:
    job = item.job
    return Completion(
        id=job.id,
        token=job.lease_text,
        attempt=job.attempts,
        **{"status": JobStatus.COMPLETED, "result": {"ok": 1}, **fields},
    )


def status(item: InFlight) -> str:
    return Job.objects.get(pk=item.job.id).status


# --- Completer ----------------------------------------------------------------------------------


def test_completer_writes_settles_counts_and_signals_each_outcome():
    slots = Slots()
    completer = Completer(slots, rollup.Recorder(), "default")
    a, b = claim(2, slots)
    seen = []

    def receiver(sender, job, completion, applied, **kw):
        seen.append((job.id, completion.status, applied))

    signals.job_finished.connect(receiver)
    try:
        assert completer.put(a, done(a)) == 1
        completer.put(b, done(b, status=JobStatus.FAILED, result=None, error="boom"))
        assert completer.waiting() == 2 and not completer.idle()
        batch = completer.take()
        assert completer.unwritten is batch  # kept until the database took it
        completer.write(batch)
    finally:
        signals.job_finished.disconnect(receiver)
    assert (status(a), status(b)) == (JobStatus.COMPLETED, JobStatus.FAILED)
    assert completer.idle() and completer.total == 2 and len(slots) == 0
    assert sorted(seen) == sorted(
        [(a.job.id, JobStatus.COMPLETED, True), (b.job.id, JobStatus.FAILED, True)]
    )


def test_completer_writes_nothing_for_a_lost_lease_and_says_so(caplog):
    slots = Slots()
    completer = Completer(slots, rollup.Recorder(), "default")
    kept, lost = claim(2, slots)
    steal_lease(lost.job.id)  # another worker's now: our outcome must not land
    lost.job.lose_lease()
    completer.put(kept, done(kept))
    completer.put(lost, done(lost))
    batch = completer.take()
    assert [c.id for c in Completer.to_write(batch)] == [kept.job.id]
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        completer.write(batch)
    assert status(kept) == JobStatus.COMPLETED and status(lost) == JobStatus.RUNNING
    assert f"job.lease_lost test.noop#{lost.job.id}" in caplog.text


def test_completer_fences_a_stolen_lease_even_when_it_did_not_know():
    slots = Slots()
    completer = Completer(slots, rollup.Recorder(), "default")
    (item,) = claim(1, slots)
    steal_lease(item.job.id)
    completer.put(item, done(item))
    completer.write(completer.take())
    assert status(item) == JobStatus.RUNNING  # the lease fence refused the stale outcome
    assert len(slots) == 0


def test_a_refused_outcome_fails_only_its_own_job_and_says_why():
    slots = Slots()
    completer = Completer(slots, rollup.Recorder(), "default")
    good, bad = claim(2, slots)
    completer.put(good, done(good))
    completer.put(bad, done(bad, result={"text": "nul \u0000 byte"}))  # jsonb refuses \u0000
    completer.take()
    completer.write_singly(ValueError("the batch was refused"))
    assert status(good) == JobStatus.COMPLETED
    row = Job.objects.get(pk=bad.job.id)
    assert row.status == JobStatus.FAILED
    assert "could not store this run's outcome" in row.error and "COMPLETED" in row.error
    assert completer.idle() and len(slots) == 0


# --- LeaseKeeper --------------------------------------------------------------------------------


def keeper(slots: Slots, finished=None) -> LeaseKeeper:
    options = WorkerOptions.from_settings(lease_seconds=LEASE)
    return LeaseKeeper("parts", options, slots, finished or (lambda item, c: 0), lambda: 7)


def test_renew_extends_the_leases_held_and_brings_cancel_requests():
    slots = Slots()
    a, b = claim(2, slots, lease_for=1)  # about to run out by our clock
    before = sql("SELECT id, lease_expires_at FROM pgjobs_job ORDER BY id")
    sql("UPDATE pgjobs_job SET cancel_requested = true WHERE id = %s", [b.job.id])
    keeper(slots).renew()
    after = sql("SELECT id, lease_expires_at FROM pgjobs_job ORDER BY id")
    assert all(new > old for (_, old), (_, new) in zip(before, after, strict=True))
    assert a.job.lease_until > time.monotonic() + LEASE - 5
    assert (a.job.cancel_requested, b.job.cancel_requested) == (False, True)
    row = WorkerRow.objects.get(worker_id="parts")
    assert row.jobs_done == 7


def test_renew_marks_a_lease_taken_over_as_lost(caplog):
    slots = Slots()
    kept, taken = claim(2, slots)
    steal_lease(taken.job.id)
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        keeper(slots).renew()
    assert taken.job.lease_lost and not kept.job.lease_lost
    assert "another worker or the reaper took it over" in caplog.text


def test_a_lease_not_renewed_in_time_is_lost_by_our_clock_and_unstarted_jobs_dropped():
    slots = Slots()
    started, waiting = claim(2, slots, lease_for=-0.1)  # beats missed: run out by our clock
    (fresh,) = claim(1, slots)
    slots.start(started, now=time.monotonic())
    now = time.monotonic()
    keeper(slots).expire_unrenewed(now)
    assert started.job.lease_lost and waiting.job.lease_lost and not fresh.job.lease_lost
    assert waiting.state == RELEASED and fresh.state == QUEUED
    assert {i.job.id for i in slots.all()} == {started.job.id, fresh.job.id}


def test_end_overdue_records_a_timeout_for_each_run_past_its_deadline():
    slots = Slots()
    (item,) = claim(1, slots, deadline=0.0)
    slots.start(item, now=0.0)
    item.deadline = 1.0  # the handler's timeout ran out at 1.0
    ended = []
    keeper(slots, finished=lambda i, c: ended.append((i, c)) or 1).end_overdue(now=5.0)
    ((got, completion),) = ended
    assert got is item and "longer than its timeout" in completion.error
    assert completion.status in (JobStatus.PENDING, JobStatus.FAILED)


# --- StepGuard ----------------------------------------------------------------------------------


def guarded_completer() -> tuple[StepGuard, Completer, Slots]:
    slots = Slots()
    completer = Completer(slots, rollup.Recorder(), "default")
    options = WorkerOptions.from_settings(listen=False, install_signal_handlers=False)
    return StepGuard(options, RunState(), completer), completer, slots


def test_a_step_whose_batch_the_database_refuses_ends_with_each_outcome_written():
    g, completer, slots = guarded_completer()
    good, bad = claim(2, slots)
    completer.put(good, done(good))
    completer.put(bad, done(bad, result={"text": "nul \u0000 byte"}))  # jsonb refuses \u0000
    assert g.run(lambda: completer.write(completer.take()) or 1) == 0  # the batch was refused
    assert status(good) == JobStatus.COMPLETED and status(bad) == JobStatus.FAILED
    assert completer.idle() and len(slots) == 0 and not g.resting


def test_a_connection_lost_in_a_step_keeps_the_outcomes_for_the_next_step(caplog):
    g, completer, slots = guarded_completer()
    (item,) = claim(1, slots)
    completer.put(item, done(item))

    def step_on_a_dying_connection() -> int:
        completer.take()
        sql("SELECT pg_terminate_backend(pg_backend_pid())")  # a real loss, mid-step
        return 1

    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        assert g.run(step_on_a_dying_connection) == 0
        assert g.resting and status(item) == JobStatus.RUNNING  # a new connection reads it
        assert g.run(lambda: completer.write(completer.take()) or 1) == 1
    assert status(item) == JobStatus.COMPLETED and completer.idle()
    got = [getattr(r, "action", "") for r in caplog.records]
    assert got == ["worker.db_error", "worker.db_back"]
