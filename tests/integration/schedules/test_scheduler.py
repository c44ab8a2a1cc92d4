"""The scheduler pass against real PostgreSQL, with an injected clock."""

import importlib
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections

from django_pgjobs import handler, scheduler
from django_pgjobs.db import database_now
from django_pgjobs.models import Job, Schedule, ScheduleFire
from django_pgjobs.scheduler import enqueue_due, schedule
from django_pgjobs.sql.schedules import request_run_now, set_enabled
from django_pgjobs.worker import Worker, WorkerOptions
from tests.support.schedules import entry, utc

pytestmark = pytest.mark.django_db

T0 = utc(2030, 1, 7, 9, 59, 30)


def state(name: str = "s") -> Schedule:
    return Schedule.objects.get(name=name)


def jobs(name: str = "s") -> list[Job]:
    return list(Job.objects.filter(operated_by=f"schedule:{name}").order_by("id"))


def test_a_new_schedule_starts_at_its_next_tick_and_fires_it_once(schedules):
    schedules(s=entry(config={"report": "daily"}, queue="reports", priority=7))
    assert enqueue_due(now=T0) == {}  # 09:59 passed before the schedule existed
    assert state().next_fire_time == utc(2030, 1, 7, 10, 0)

    counts = enqueue_due(now=utc(2030, 1, 7, 10, 0, 2))
    assert counts == {"fired": 1}
    [job] = jobs()
    assert (job.type, job.config, job.queue, job.priority, job.status) == (
        "test.echo",
        {"report": "daily"},
        "reports",
        7,
        "PENDING",
    )
    fire = ScheduleFire.objects.get(schedule="s")
    assert (fire.fire_time, fire.job_id) == (utc(2030, 1, 7, 10, 0), job.id)
    s = state()
    assert (s.last_fire_time, s.last_job_id, s.next_fire_time) == (
        utc(2030, 1, 7, 10, 0),
        job.id,
        utc(2030, 1, 7, 10, 1),
    )

    assert enqueue_due(now=utc(2030, 1, 7, 10, 0, 40)) == {}
    assert len(jobs()) == 1


def test_a_tick_fires_once_even_for_a_worker_that_read_a_stale_cursor(schedules):
    schedules(s=entry())
    enqueue_due(now=T0)
    enqueue_due(now=utc(2030, 1, 7, 10, 0, 1))
    # Another worker read the schedule before the cursor moved: it tries the same tick.
    Schedule.objects.filter(name="s").update(next_fire_time=utc(2030, 1, 7, 10, 0))
    assert enqueue_due(now=utc(2030, 1, 7, 10, 0, 3)) == {"taken": 1}
    assert len(jobs()) == 1


@pytest.mark.parametrize(
    ("policy", "window", "fired_at", "skipped"),
    [
        ("latest", None, [utc(2030, 1, 7, 12)], 2),
        ("none", None, [], 3),
        ("none", 3 * 3600, [utc(2030, 1, 7, 12)], 2),
        ("all", None, [utc(2030, 1, 7, 10), utc(2030, 1, 7, 11), utc(2030, 1, 7, 12)], 0),
        ("all", 5400, [utc(2030, 1, 7, 11), utc(2030, 1, 7, 12)], 1),
    ],
)
def test_missed_ticks_after_downtime_follow_the_catch_up_policy(
    schedules, policy, window, fired_at, skipped
):
    schedules(s=entry(cron="0 * * * *", catch_up=policy, catch_up_window=window))
    enqueue_due(now=T0)  # cursor: 10:00; then no worker runs until 12:30
    counts = enqueue_due(now=utc(2030, 1, 7, 12, 30))
    assert counts["fired"] == len(fired_at) and counts["skipped"] == skipped
    fires = list(ScheduleFire.objects.filter(schedule="s").order_by("fire_time"))
    assert [f.fire_time for f in fires] == fired_at
    assert [f.job_id for f in fires] == [j.id for j in jobs()]  # oldest tick, oldest job
    assert state().next_fire_time == utc(2030, 1, 7, 13)


def test_a_disabled_schedule_does_not_fire_and_restarts_from_now(schedules):
    schedules(s=entry(cron="0 * * * *"))
    enqueue_due(now=T0)
    assert set_enabled(["s"], False) == 1
    assert enqueue_due(now=utc(2030, 1, 7, 10, 0, 1)) == {}
    assert state().next_fire_time is None
    set_enabled(["s"], True)
    assert enqueue_due(now=utc(2030, 1, 7, 12, 30)) == {}  # 10:00..12:00 were disabled
    assert state().next_fire_time == utc(2030, 1, 7, 13)
    assert enqueue_due(now=utc(2030, 1, 7, 13)) == {"fired": 1}


def test_run_now_fires_once_at_once_even_when_disabled(schedules):
    schedules(s=entry(cron="0 3 * * *"))
    enqueue_due(now=T0)
    set_enabled(["s"], False)
    assert request_run_now(["s"]) == 1
    now = utc(2030, 1, 7, 10, 17, 5)
    assert enqueue_due(now=now) == {"run_now": 1, "fired": 1}
    assert [f.fire_time for f in ScheduleFire.objects.filter(schedule="s")] == [now]
    assert not state().run_now_requested and state().last_fire_time == now
    assert enqueue_due(now=now + timedelta(seconds=5)) == {}
    assert len(jobs()) == 1


def test_a_redefined_cron_restarts_from_now(schedules):
    schedules(s=entry(cron="*/15 * * * *"))
    enqueue_due(now=T0)
    assert state().next_fire_time == utc(2030, 1, 7, 10, 0)
    schedules(s=entry(cron="20 * * * *"))
    assert enqueue_due(now=utc(2030, 1, 7, 10, 5)) == {}  # 10:00 is no tick of the new cron
    assert state().next_fire_time == utc(2030, 1, 7, 10, 20)


def test_an_invalid_schedule_is_logged_once_and_the_others_still_fire(
    schedules, caplog, monkeypatch
):
    monkeypatch.setattr(scheduler, "_reported", set())
    schedules(s=entry(), broken=entry(cron="every minute"))
    enqueue_due(now=T0)
    assert enqueue_due(now=utc(2030, 1, 7, 10, 0, 1)) == {"fired": 1}
    assert not Schedule.objects.filter(name="broken").exists()
    assert caplog.text.count("schedule.invalid broken") == 1  # not at every pass
    assert "manage.py check" in caplog.text


def test_a_failed_enqueue_rolls_the_fire_back_and_is_retried(schedules, monkeypatch, caplog):
    schedules(s=entry())
    enqueue_due(now=T0)

    def refuse(*args, **kwargs):
        raise RuntimeError("database said no")

    monkeypatch.setattr(importlib.import_module("django_pgjobs.enqueue"), "enqueue", refuse)
    assert enqueue_due(now=utc(2030, 1, 7, 10, 0, 1)) == {"errors": 1}
    assert not ScheduleFire.objects.exists()
    assert "schedule.error s" in caplog.text
    monkeypatch.undo()
    assert enqueue_due(now=utc(2030, 1, 7, 10, 0, 6)) == {"fired": 1}
    assert ScheduleFire.objects.get().fire_time == utc(2030, 1, 7, 10, 0)


def test_the_decorator_schedules_a_handler_above_or_below_it(clean_decorators):
    @schedule("*/5 * * * *", timezone="UTC", config={"k": "v"})
    @handler("tests.schedules.above")
    def above(job):
        return None

    @handler("tests.schedules.below")
    @schedule("*/10 * * * *", name="below-every-10", timezone="UTC")
    def below(job):
        return None

    specs = scheduler.valid_schedules()
    assert specs["tests.schedules.above"].type == "tests.schedules.above"
    assert specs["tests.schedules.above"].config == {"k": "v"}
    assert specs["below-every-10"].type == "tests.schedules.below"
    enqueue_due(now=T0)
    assert enqueue_due(now=utc(2030, 1, 7, 10, 0)) == {"fired": 2}
    assert sorted(j.type for j in Job.objects.all()) == [
        "tests.schedules.above",
        "tests.schedules.below",
    ]


def test_no_schedule_means_no_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert enqueue_due() == {}


def test_without_an_injected_clock_the_database_clock_is_used(schedules):
    schedules(s=entry(cron="* * * * * *"))
    enqueue_due()
    db_now = database_now()
    assert db_now < state().next_fire_time <= db_now + timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
def test_many_workers_racing_for_the_same_tick_enqueue_one_job(schedules):
    schedules(s=entry())
    enqueue_due(now=T0)
    racers = 12
    barrier = threading.Barrier(racers)
    results, errors = [], []

    def race():
        try:
            barrier.wait()
            results.append(enqueue_due(now=utc(2030, 1, 7, 10, 0, 1)))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert sum(r["fired"] for r in results) == 1
    assert len(jobs()) == 1 and ScheduleFire.objects.count() == 1


class TestWorkerServices:
    """A worker runs the scheduler and the pruner as services, each at its interval."""

    @pytest.fixture
    def calls(self, monkeypatch):
        seen = []
        monkeypatch.setattr(scheduler, "enqueue_due", lambda **kw: seen.append("schedule") or {})
        monkeypatch.setattr(
            "django_pgjobs.retention.prune_once", lambda **kw: seen.append("prune") or {}
        )
        return seen

    def runner(self, **options):
        o = WorkerOptions(
            listen=False, install_signal_handlers=False, using=connection.alias, **options
        )
        return Worker(o).services

    def test_runs_each_service_at_its_interval(self, calls, monkeypatch):
        clock = [1000.0]
        monkeypatch.setattr("django_pgjobs.worker.services.time.monotonic", lambda: clock[0])
        monkeypatch.setattr("django_pgjobs.worker.services.random.random", lambda: 0.5)
        runner = self.runner(scheduler_interval=60, prune_interval=600)
        runner.run_due(clock[0])
        assert calls == ["schedule"]  # at start; the pruner in the second half of its interval
        clock[0] = 1030.0
        runner.run_due(clock[0])
        assert calls == ["schedule"]
        clock[0] = 1060.0
        runner.run_due(clock[0])
        assert calls == ["schedule", "schedule"]
        clock[0] = 1450.0  # 1000 + 600 * (0.5 + 0.5 * 0.5)
        runner.run_due(clock[0])
        assert calls.count("prune") == 1

    def test_can_be_switched_off_and_stays_off_in_burst_mode(self, calls):
        names = {s.name for s in self.runner(scheduler=False, prune=False).services}
        assert names.isdisjoint({"scheduler", "pruner"})
        assert {s.name for s in self.runner(burst=True).services} == {
            "queue_controls",
            "reaper",
            "rollup_flush",
        }
        self.runner(scheduler=False, prune=False).run_due(float("inf"))
        self.runner(burst=True).run_due(float("inf"))
        assert calls == []

    def test_a_failing_service_is_logged_and_the_others_go_on(self, monkeypatch, caplog, calls):
        def broken(**kw):
            raise ValueError("bug in a step")

        monkeypatch.setattr(scheduler, "enqueue_due", broken)
        self.runner(prune_interval=1e-9).run_due(float("inf"))
        assert "maintenance service scheduler failed" in caplog.text
        assert "bug in a step" in caplog.text and calls == ["prune"]
