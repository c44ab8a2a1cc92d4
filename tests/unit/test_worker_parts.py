"""The contracts of Slots, ServiceRunner, RunState, StepGuard and Interrupts, without a worker
or a database."""

import logging
import math
import signal
import threading

import pytest
from django.db import IntegrityError, OperationalError

from django_pgjobs import JobStatus, rollup
from django_pgjobs.queries import Completion
from django_pgjobs.registry import HandlerSpec
from django_pgjobs.worker import guard, interrupts, services
from django_pgjobs.worker.completer import Completer
from django_pgjobs.worker.guard import STEP_ERROR_PAUSE, StepGuard
from django_pgjobs.worker.interrupts import Interrupts
from django_pgjobs.worker.options import WorkerOptions
from django_pgjobs.worker.policy import EXIT_DATABASE_UNREACHABLE
from django_pgjobs.worker.run_state import EXIT_STUCK, RunState
from django_pgjobs.worker.slots import (
    ABANDONED,
    DONE,
    QUEUED,
    RELEASED,
    STARTED,
    InFlight,
    Slots,
)
from tests.testapp.contexts import job_context


def item(job_id: int, timeout: float | None = None) -> InFlight:
    job = job_context(id=job_id)
    spec = HandlerSpec(type="t", func=lambda job: None, timeout=timeout)
    return InFlight(job, spec, deadline=0.0 if timeout else None)


# --- Slots --------------------------------------------------------------------------------------


def test_a_started_job_gets_its_deadline_and_is_held_until_removed():
    slots, a, b = Slots(), item(1, timeout=5), item(2)
    slots.add([a, b])
    assert len(slots) == 2 and slots.timed == 1
    assert slots.start(a, now=100.0) and a.state == STARTED and a.deadline == 105.0
    assert slots.until_deadline(now=101.0) == 4.0
    assert {i.job.id for i in slots.held()} == {1, 2}
    assert slots.finish(a) and a.state == DONE
    assert [i.job.id for i in slots.held()] == [2]
    slots.remove([1, 2, 3])  # an id not held is ignored
    assert len(slots) == 0 and slots.timed == 0 and slots.until_deadline(0) == math.inf


def test_a_released_job_is_never_started_and_unrelease_gives_it_back():
    slots, a, b = Slots(), item(1), item(2)
    slots.add([a, b])
    assert slots.start(b, now=1.0)
    assert slots.release([a, b]) == [a]  # b runs: only the unstarted one goes back
    assert a.state == RELEASED and not slots.start(a, now=2.0)
    slots.unrelease([a])
    assert a.state == QUEUED and slots.start(a, now=3.0)


def test_an_overdue_run_is_abandoned_once_and_its_finish_is_refused():
    slots, a, b = Slots(), item(1, timeout=1), item(2, timeout=10)
    slots.add([a, b])
    slots.start(a, now=0.0)
    slots.start(b, now=0.0)
    assert slots.abandon_overdue(now=2.0) == [a] and a.state == ABANDONED
    assert slots.abandon_overdue(now=2.0) == []  # decided once
    assert slots.zombies == 1
    assert not slots.finish(a)  # its outcome was decided by the timeout
    assert slots.zombies == 0
    assert slots.finish(b)


def test_abandon_running_takes_only_the_started_runs():
    slots, a, b = Slots(), item(1), item(2)
    slots.add([a, b])
    slots.start(a, now=0.0)
    assert slots.abandon_running() == [a] and b.state == QUEUED


def test_start_and_release_racing_decide_each_job_exactly_once():
    slots = Slots()
    items = [item(i) for i in range(2000)]
    slots.add(items)
    started: list[InFlight] = []
    released: list[InFlight] = []
    go = threading.Barrier(3)

    def starter(part):
        go.wait()
        started.extend(i for i in part if slots.start(i, now=0.0))

    def releaser():
        go.wait()
        released.extend(slots.release(items))

    threads = [threading.Thread(target=starter, args=(items[k::2],)) for k in (0, 1)]
    threads.append(threading.Thread(target=releaser))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(started) + len(released) == len(items)
    assert not {id(i) for i in started} & {id(i) for i in released}


# --- ServiceRunner ------------------------------------------------------------------------------


class Counting(services.Service):
    interval = 60.0
    jitter = 0.0

    def __init__(self, name, fail=None):
        super().__init__("default")
        self.name = name
        self.fail = list(fail or [])
        self.passes = 0

    def run_once(self, now=None):
        self.passes += 1
        if self.fail:
            raise self.fail.pop(0)
        return {"done": self.passes}


def test_runner_runs_what_is_due_and_schedules_the_next_pass():
    a, b = Counting("a"), Counting("b")
    runner = services.ServiceRunner([a, b])
    t0 = min(runner._due.values())
    runner.run_due(t0)
    assert (a.passes, b.passes) == (1, 1) and runner.last == {"a": {"done": 1}, "b": {"done": 1}}
    runner.run_due(t0 + 30)  # not due again before its interval
    assert (a.passes, b.passes) == (1, 1)
    runner.run_now(["b"])
    assert (a.passes, b.passes) == (1, 2)


def test_a_database_error_retries_sooner_with_a_growing_delay(caplog):
    broken = Counting("broken", fail=[OperationalError("down")] * 3)
    runner = services.ServiceRunner([broken])
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        delays = []
        for _ in range(3):
            runner.run_now(["broken"])
            delays.append(runner._policy["broken"].backoff)
    assert delays == [0.5, 1.0, 2.0]
    assert "maintenance service broken: database error" in caplog.text
    runner.run_now(["broken"])  # the database is back: the delay starts again from nothing
    assert runner._policy["broken"].backoff == 0.0 and runner.last["broken"] == {"done": 4}


def test_a_failing_service_is_logged_and_the_others_still_run(caplog):
    bad, good = Counting("bad", fail=[ValueError("bug")]), Counting("good")
    runner = services.ServiceRunner([bad, good])
    with caplog.at_level(logging.ERROR, "django_pgjobs.worker"):
        runner.run_due(min(runner._due.values()))
    assert good.passes == 1 and "bad" not in runner.last
    assert "maintenance service bad failed" in caplog.text and "ValueError: bug" in caplog.text


def test_after_stop_no_pass_starts_and_the_thread_ends():
    class Slow(Counting):
        def run_once(self, now=None):
            self.stopping.wait(10)  # a long pass ends early when the worker stops
            return super().run_once(now)

    slow, later = Slow("slow"), Counting("later")
    runner = services.ServiceRunner([slow, later])
    later_due = runner._due["later"] = math.inf  # never due: only stop can end the loop
    runner.start()
    runner.stop()
    runner.join(10)
    assert runner._thread is not None and not runner._thread.is_alive()
    assert later.passes == 0 and later_due == math.inf
    runner.run_due(math.inf)
    assert later.passes == 0


def test_the_jitter_spreads_the_interval_within_its_bounds():
    s = Counting("s")
    s.jitter = 0.2
    waits = [s.next_wait() for _ in range(500)]
    assert all(48.0 <= w <= 72.0 for w in waits) and len(set(waits)) > 1


# --- RunState -----------------------------------------------------------------------------------


def test_stop_sets_stopping_wakes_the_claim_thread_and_a_plain_stop_keeps_the_reason():
    state = RunState()
    assert not state.is_stopping and state.exit_code == 0 and not state.woken.is_set()
    state.wake()
    assert state.woken.is_set() and not state.is_stopping
    state.woken.clear()
    state.stop(EXIT_STUCK)
    assert state.is_stopping and state.stopping.is_set() and state.woken.is_set()
    state.stop()  # a plain stop later (shutdown) does not erase why the worker stops
    assert state.exit_code == EXIT_STUCK


# --- StepGuard ----------------------------------------------------------------------------------


def step_guard(**options) -> tuple[StepGuard, RunState, Completer]:
    """A guard over a real Completer; nothing here reaches the database (no connection opens:
    closing the failed one is a no-op)."""
    state = RunState()
    completer = Completer(Slots(), rollup.Recorder(), "default")
    o = WorkerOptions.from_settings(listen=False, install_signal_handlers=False, **options)
    return StepGuard(o, state, completer), state, completer


def fails(exc: Exception):
    def step() -> int:
        raise exc

    return step


def actions(caplog) -> list[str]:
    return [getattr(r, "action", "") for r in caplog.records]


def test_a_step_that_succeeds_returns_its_claim_and_owes_no_rest():
    g, _, _ = step_guard()
    assert g.run(lambda: 7) == 7
    assert not g.resting and g.rest() == 0.0


def test_connection_errors_back_off_doubling_and_a_success_says_how_long_it_lasted(caplog):
    g, state, _ = step_guard()
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        rests = []
        for _ in range(3):
            assert g.run(fails(OperationalError("server closed the connection"))) == 0
            assert g.resting
            rests.append(g.rest())
        assert g.run(lambda: 2) == 2
    assert rests == [0.25, 0.5, 1.0]  # the loop's backoff (policy.LOOP_BACKOFF)
    assert actions(caplog) == ["worker.db_error"] * 3 + ["worker.db_back"]
    assert "retrying in 0.25s" in caplog.records[0].getMessage()
    assert not g.resting and not state.is_stopping and state.exit_code == 0


def test_an_unexpected_error_is_logged_with_its_traceback_and_owes_one_pause(caplog):
    g, _, _ = step_guard()
    with caplog.at_level(logging.ERROR, "django_pgjobs.worker"):
        assert g.run(fails(KeyError("bug"))) == 0
    assert actions(caplog) == ["worker.step_error"] and caplog.records[0].exc_info
    assert g.resting and g.rest() == STEP_ERROR_PAUSE
    assert not g.resting and g.rest() == 0.0  # owed once


def test_a_refusal_with_nothing_unwritten_is_a_bug_not_an_outcome(caplog):
    g, _, _ = step_guard()
    with caplog.at_level(logging.ERROR, "django_pgjobs.worker"):
        assert g.run(fails(IntegrityError("refused"))) == 0
    assert actions(caplog) == ["worker.step_error"] and g.rest() == STEP_ERROR_PAUSE


def test_a_refused_batch_is_handed_to_the_completer_to_write_one_by_one(caplog):
    g, _, completer = step_guard()
    job = item(1)
    job.job.lose_lease()  # nothing to write for it: no database needed
    completion = Completion(id=1, token=job.job.lease_text, attempt=1, status=JobStatus.COMPLETED)
    completer.slots.add([job])
    completer.put(job, completion)
    completer.take()
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        assert g.run(fails(IntegrityError("refused"))) == 0
    assert "worker.batch_refused" in actions(caplog) and "worker.step_error" not in actions(caplog)
    assert completer.idle() and completer.total == 1 and not g.resting


def test_a_burst_worker_gives_up_once_the_outage_lasted_give_up_after(caplog):
    g, state, _ = step_guard(burst=True, give_up_after=0.0)
    with caplog.at_level(logging.ERROR, "django_pgjobs.worker"):
        g.run(fails(OperationalError("connection refused")))
    assert actions(caplog) == ["worker.gave_up"]
    assert state.is_stopping and state.exit_code == EXIT_DATABASE_UNREACHABLE


def test_a_long_lived_worker_never_gives_up():
    g, state, _ = step_guard(burst=False, give_up_after=0.0)
    g.run(fails(OperationalError("connection refused")))
    assert not state.is_stopping and state.exit_code == 0


def test_a_stopping_worker_warns_once_about_the_database(caplog):
    g, state, _ = step_guard()
    state.stop()
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        for _ in range(3):
            g.guarded(fails(OperationalError("connection refused")))
    assert actions(caplog) == ["worker.stop_db_error"]


def test_retry_tries_until_it_succeeds_and_once_after_giving_up(monkeypatch):
    monkeypatch.setattr(guard, "RETRY_WAIT_MAX", 0.001)
    g, state, _ = step_guard()
    calls = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("down")

    g.retry(flaky, attempts=3)
    assert len(calls) == 3
    calls.clear()
    g.retry(fails(OperationalError("down")), attempts=2)  # gives up after its attempts, quietly
    state.stop(EXIT_DATABASE_UNREACHABLE)
    tries = []
    g.retry(lambda: tries.append(1) or fails(OperationalError("down"))(), attempts=3)
    assert tries == [1]


def test_a_worker_whose_threads_are_all_stuck_stops_with_exit_code_3(caplog):
    g, state, _ = step_guard(concurrency=2)
    g.stop_if_stuck(1)
    assert not state.is_stopping
    with caplog.at_level(logging.ERROR, "django_pgjobs.worker"):
        g.stop_if_stuck(2)
        g.stop_if_stuck(2)  # decided once
    assert state.is_stopping and state.exit_code == EXIT_STUCK
    assert actions(caplog) == ["worker.stuck"]


# --- Interrupts ---------------------------------------------------------------------------------


class Exited(Exception):
    pass


def test_the_first_signal_stops_gracefully_and_the_second_releases_and_exits(monkeypatch, caplog):
    state, slots = RunState(), Slots()
    handlers = Interrupts(state, slots, "w1", WorkerOptions.from_settings(shutdown_timeout=7))
    codes = []

    def exit_now(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr(interrupts.os, "_exit", exit_now)
    with caplog.at_level(logging.WARNING, "django_pgjobs.worker"):
        handlers.received(signal.SIGTERM)
        assert state.is_stopping and codes == []
        assert "up to 7" in caplog.records[0].getMessage()
        with pytest.raises(Exited):  # nothing held: nothing to release, no database asked
            handlers.received(signal.SIGINT)
    assert codes == [128 + signal.SIGINT]
    assert actions(caplog) == ["worker.stopping", "worker.killed"]


def test_install_replaces_the_handlers_on_the_main_thread_only():
    handlers = Interrupts(RunState(), Slots(), "w1", WorkerOptions.from_settings())
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        other = threading.Thread(target=handlers.install)
        other.start()
        other.join(5)
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
        handlers.install()
        assert signal.getsignal(signal.SIGTERM) == handlers.received
        assert signal.getsignal(signal.SIGINT) == handlers.received
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
