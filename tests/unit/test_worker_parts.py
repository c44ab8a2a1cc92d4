"""The contracts of Slots and ServiceRunner, without a worker or a database."""

import logging
import math
import threading

from django.db import OperationalError

from django_pgjobs.registry import HandlerSpec
from django_pgjobs.worker import services
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
