"""PGJOBS["DATABASE"] = "queue": every table and statement of the queue on that alias.

Run twice: here, with a second database on the suite's server and PGJOBS/routers overridden per
test; and by test_two_servers.py, with tests.support.routed_settings and the queue on a second
PostgreSQL server, where the test databases themselves were migrated through QueueRouter.
After every test, the default database holds no row of the queue (routed: no table either).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.db import connections, transaction
from django.utils import timezone

from django_pgjobs import enqueue, enqueue_many, enqueue_on_commit, health, scheduler, stats
from django_pgjobs.checks import check_settings
from django_pgjobs.exceptions import UnknownJobType
from django_pgjobs.models import Job, Queue, Schedule
from django_pgjobs.routers import QueueRouter
from django_pgjobs.testing import capture_enqueued, run_jobs
from tests.conftest import ROOT, run_worker
from tests.support.admin import make_job
from tests.support.schedules import entry, utc
from tests.testapp import tasks as t
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "queue"])
ADMIN = "/admin/django_pgjobs/job/"


def rows(alias: str, query: str, params: object = None) -> list[tuple]:
    with connections[alias].cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def pgjobs_tables(alias: str) -> list[str]:
    return [
        r[0]
        for r in rows(
            alias,
            "SELECT tablename FROM pg_tables WHERE schemaname = "
            "current_schema() AND tablename LIKE 'pgjobs%%' ORDER BY 1",
        )
    ]


def default_rows() -> dict[str, int]:
    return {
        t: rows("default", f'SELECT count(*) FROM "{t}"')[0][0] for t in pgjobs_tables("default")
    }


def queue_jobs(**where: object) -> list[tuple]:
    """(id, type, status) of the jobs on the queue's database, read with its own connection."""
    cond = " AND ".join(f"{k} = %s" for k in where) or "true"
    return rows(
        "queue",
        f"SELECT id, type, status FROM pgjobs_job WHERE {cond} ORDER BY id",
        list(where.values()),
    )


@pytest.fixture(autouse=True)
def on_queue(settings):
    """The queue on "queue" (routed settings: already); afterwards nothing of it on default."""
    routed = settings.PGJOBS.get("DATABASE") == "queue"
    if not routed:
        settings.PGJOBS = {**settings.PGJOBS, "DATABASE": "queue"}
        settings.DATABASE_ROUTERS = ["django_pgjobs.routers.QueueRouter"]
    assert not any(default_rows().values())
    yield routed
    if routed:
        assert pgjobs_tables("default") == [], "routed: the queue's tables exist on default"
    else:
        assert not any(default_rows().values()), f"written to default: {default_rows()}"


# --- the worker --------------------------------------------------------------------------------


def test_the_worker_and_run_jobs_drain_the_queue_database():
    ids = enqueue_many("test.noop", [{}] * 20)
    echo = enqueue("test.echo", {"n": 1})
    assert Job.objects.db == "queue" and len(queue_jobs(status="PENDING")) == 21
    run_worker()
    assert {s for _, _, s in queue_jobs()} == {"COMPLETED"}
    assert Job.objects.get(pk=echo.id).result == {"echo": {"n": 1}}
    later = enqueue("test.echo", {"n": 2}, run_after=timedelta(hours=1))
    ran = run_jobs(now=timezone.now() + timedelta(hours=2))
    assert [j.id for j in ran] == [later.id] and ran[0].status == "COMPLETED"
    assert len(ids) == 20


def test_runjobs_database_flag_drains_the_queue_database(on_queue):
    enqueue_many("test.noop", [{}] * 30)
    ds = "tests.support.routed_settings" if on_queue else "tests.settings"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PGJOBS_TEST_DB_NAME": connections["default"].settings_dict["NAME"],
        "PGJOBS_TEST_QUEUE_DB_NAME": connections["queue"].settings_dict["NAME"],
    }
    # tests.settings keeps PGJOBS["DATABASE"] = "default": the flag alone moves the worker.
    done = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            "runjobs",
            "--settings",
            ds,
            "--database",
            "queue",
            "--burst",
            "--no-listen",
            "--concurrency",
            "2",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert {s for _, _, s in queue_jobs()} == {"COMPLETED"}
    assert rows("queue", "SELECT count(*) FROM pgjobs_job")[0][0] == 30


def test_runjobs_refuses_an_unknown_alias():
    out = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            "runjobs",
            "--settings",
            "tests.settings",
            "--database",
            "nope",
            "--burst",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and "'nope' is not an alias of DATABASES" in out.stderr


# --- the admin ---------------------------------------------------------------------------------


@pytest.mark.parametrize("routers", [True, False], ids=["router", "no-router"])
def test_admin_lists_opens_and_retries_a_job_that_exists_only_on_the_queue(
    admin_client, settings, routers
):
    if not routers:  # the models' manager alone reads the queue's database (W006 warns)
        settings.DATABASE_ROUTERS = []
    job = make_job("FAILED")
    assert queue_jobs(id=job.id) == [(job.id, "test.behave", "FAILED")]
    listing = admin_client.get(ADMIN)
    assert listing.status_code == 200 and f"{ADMIN}{job.id}/change/" in listing.text
    assert admin_client.get(ADMIN, {"q": str(job.id)}).context["cl"].result_count == 1
    assert admin_client.get(ADMIN, {"state": "FAILED"}).context["cl"].result_count == 1
    page = admin_client.get(f"{ADMIN}{job.id}/change/")
    assert page.status_code == 200 and "declined" in page.text
    response = admin_client.post(
        ADMIN, {"action": "retry_jobs", "index": 0, "_selected_action": [job.id]}, follow=True
    )
    assert "Retry: 1 done" in " | ".join(str(m) for m in get_messages(response.wsgi_request))
    assert queue_jobs(id=job.id) == [(job.id, "test.behave", "PENDING")]
    cancel = admin_client.post(
        ADMIN, {"action": "cancel_jobs", "index": 0, "_selected_action": [job.id]}, follow=True
    )
    assert cancel.status_code == 200 and queue_jobs(id=job.id)[0][2] == "CANCELLED"
    delete = admin_client.post(f"{ADMIN}{job.id}/delete/", {"post": "yes"}, follow=True)
    assert delete.status_code == 200 and queue_jobs(id=job.id) == []


def test_admin_dashboard_queues_and_schedules_read_the_queue_database(admin_client, settings):
    make_job("PENDING", queue="mail")
    call_command("pgjobs_queue", "pause", "mail", stdout=StringIO())
    data = admin_client.get("/admin/django_pgjobs/dashboard/json/").json()
    assert {q["queue"]: q["due"] for q in data["queues"]}["mail"] == 1
    assert admin_client.get("/admin/django_pgjobs/dashboard/").status_code == 200
    queues = admin_client.get("/admin/django_pgjobs/queue/")
    assert queues.status_code == 200 and "mail" in queues.text
    admin_client.post(
        "/admin/django_pgjobs/queue/",
        {"action": "resume", "index": 0, "_selected_action": ["mail"]},
    )
    assert rows("queue", "SELECT paused FROM pgjobs_queue WHERE name = 'mail'") == [(False,)]
    settings.PGJOBS = {**settings.PGJOBS, "SCHEDULES": {"tick": entry()}}
    scheduler.enqueue_due(now=utc(2030, 1, 7, 9, 59, 30))
    schedules = admin_client.get("/admin/django_pgjobs/schedule/")
    assert schedules.status_code == 200 and "tick" in schedules.text


# --- stats, health, prune, schedules, queue controls -------------------------------------------


def test_commands_stats_health_prune_and_queue_controls_use_the_queue_database():
    make_job("COMPLETED", finished_at=timezone.now() - timedelta(days=30))
    make_job("PENDING")
    out = StringIO()
    call_command("pgjobs_queue", "limit", "default", "3", stdout=out)
    assert rows("queue", "SELECT concurrency_limit FROM pgjobs_queue") == [(3,)]
    assert Queue.objects.get(pk="default").concurrency_limit == 3
    call_command("pgjobs_stats", "--json", stdout=(out := StringIO()))
    assert {q["queue"]: q["due"] for q in json.loads(out.getvalue())["queues"]}["default"] == 1
    assert stats.snapshot()["queues"][0]["due"] == 1
    with pytest.raises(SystemExit):  # it sees the queue database's due job, and no worker
        call_command("pgjobs_health", "--json", stdout=(out := StringIO()))
    assert "1 jobs are due and no worker" in json.loads(out.getvalue())["problems"][0]
    call_command("pgjobs_prune", stdout=(out := StringIO()))
    assert "deleted 1 completed" in out.getvalue().lower(), out.getvalue()
    assert [s for _, _, s in queue_jobs()] == ["PENDING"]
    worker = run_worker()
    call_command("pgjobs_health", "--json", stdout=(out := StringIO()))
    assert json.loads(out.getvalue())["healthy"] is True
    assert health.readyz(worker)[1]["migrations"] == "ok"


def test_schedules_fire_on_the_queue_database(settings):
    settings.PGJOBS = {**settings.PGJOBS, "SCHEDULES": {"tick": entry()}}
    scheduler.enqueue_due(now=utc(2030, 1, 7, 9, 59, 30))
    scheduler.enqueue_due(now=utc(2030, 1, 7, 10, 0, 2))
    assert [t for _, t, _ in queue_jobs()] == ["test.echo"]
    assert Schedule.objects.get(pk="tick").last_job_id == queue_jobs()[0][0]
    assert rows("queue", "SELECT count(*) FROM pgjobs_schedule_fire") == [(1,)]


# --- Tasks backend and testing helpers ---------------------------------------------------------


def test_tasks_backend_and_testing_helpers_use_the_queue_database():
    with capture_enqueued() as captured:
        result = t.add.enqueue(2, 3)
    captured.assert_enqueued(t.add, count=1)
    assert len(queue_jobs()) == 1
    run_jobs()
    assert t.add.get_result(result.id).return_value == 5


# --- transactions ------------------------------------------------------------------------------


def test_enqueue_is_transactional_on_the_queue_alias_only():
    with pytest.raises(RuntimeError), transaction.atomic(using="queue"):
        enqueue("test.echo", {"n": 1})
        enqueue_on_commit("test.echo", {"n": 2}, key="same-db", using="queue")
        raise RuntimeError("rolled back")
    assert queue_jobs() == []
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        enqueue("test.echo", {"n": 3})  # another alias: committed on its own, not rolled back
        raise RuntimeError("rolled back")
    assert len(queue_jobs()) == 1


def test_enqueue_on_commit_waits_for_the_other_database_and_follows_its_rollback():
    with transaction.atomic(using="default"):
        Effect.objects.create(job_id=0, value="order 1")
        enqueue_on_commit("test.echo", {"order": 1}, key="receipt:1", using="default")
        assert queue_jobs() == []  # not before the commit
    assert [t for _, t, _ in queue_jobs(unique_key="receipt:1")] == ["test.echo"]
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        enqueue_on_commit("test.echo", {"order": 2}, key="receipt:2", using="default")
        raise RuntimeError("the order was not saved")
    assert queue_jobs(unique_key="receipt:2") == []
    with transaction.atomic(using="default"):  # bad input: raised here, transaction usable
        with pytest.raises(UnknownJobType):
            enqueue_on_commit("no.such.type", key="k", using="default")
        Effect.objects.create(job_id=0, value="still usable")
    assert Effect.objects.filter(value="still usable").exists()


class Crash(Exception):
    """The process dying between the business commit and the enqueue (or after both)."""


def crash() -> None:
    raise Crash


def test_a_retry_after_a_crash_between_the_two_commits_enqueues_exactly_once():
    # Crash after the business commit, before the enqueue: the job is missing ...
    with pytest.raises(Crash), transaction.atomic(using="default"):
        Effect.objects.create(job_id=0, value="order 7")
        transaction.on_commit(crash, using="default")
        enqueue_on_commit("test.echo", {"order": 7}, key="receipt:7", using="default")
    assert Effect.objects.filter(value="order 7").exists() and queue_jobs() == []
    # ... and the reconciler's retry adds it, once however often it runs.
    for _ in range(3):
        enqueue_on_commit("test.echo", {"order": 7}, key="receipt:7", using="default")
    assert len(queue_jobs(unique_key="receipt:7")) == 1
    # Crash after both commits: the retry finds the job, even once it has completed.
    with pytest.raises(Crash), transaction.atomic(using="default"):
        enqueue_on_commit("test.echo", {"order": 8}, key="receipt:8", using="default")
        transaction.on_commit(crash, using="default")
    run_worker()
    enqueue_on_commit("test.echo", {"order": 8}, key="receipt:8", using="default")
    assert [s for _, _, s in queue_jobs(unique_key="receipt:8")] == ["COMPLETED"]


CRASHING_ORDER = """
import os, django
django.setup()
from django.db import transaction
from django_pgjobs import enqueue_on_commit
from tests.testapp.models import Effect
with transaction.atomic(using="default"):
    Effect.objects.create(job_id=0, value="order 9")
    transaction.on_commit(lambda: os._exit(9), using="default")  # dies after the commit
    enqueue_on_commit("test.echo", {"order": 9}, key="receipt:9", using="default")
"""


def test_a_process_killed_between_the_two_commits_is_repaired_by_calling_again():
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.support.routed_settings",
        "PGJOBS_TEST_DB_NAME": connections["default"].settings_dict["NAME"],
        "PGJOBS_TEST_QUEUE_DB_NAME": connections["queue"].settings_dict["NAME"],
    }
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_ORDER],
        cwd=ROOT,
        env=env,  # noqa: S603
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 9, done.stderr
    assert Effect.objects.filter(value="order 9").exists() and queue_jobs() == []
    enqueue_on_commit("test.echo", {"order": 9}, key="receipt:9", using="default")
    enqueue_on_commit("test.echo", {"order": 9}, key="receipt:9", using="default")
    assert len(queue_jobs(unique_key="receipt:9")) == 1


def test_concurrent_retries_of_one_key_enqueue_one_job():
    barrier, errors = threading.Barrier(6), []

    def retry() -> None:
        try:
            barrier.wait(10)
            enqueue_on_commit("test.echo", {"n": 1}, key="contended", using="default")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=retry) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert errors == [] and len(queue_jobs(unique_key="contended")) == 1


# --- routing and its check ---------------------------------------------------------------------


def test_router_and_check(settings, on_queue):
    r = QueueRouter()
    assert r.db_for_read(Job) == r.db_for_write(Job) == "queue"
    assert r.db_for_write(Effect) is None
    assert (
        r.allow_migrate("queue", "django_pgjobs"),
        r.allow_migrate("default", "django_pgjobs"),
        r.allow_migrate("queue", "auth"),
        r.allow_migrate("default", "auth"),
    ) == (True, False, False, None)
    assert [m.id for m in check_settings()] == []
    settings.DATABASE_ROUTERS = []
    warnings = check_settings()
    assert [m.id for m in warnings] == ["pgjobs.W006"]
    assert "writes go to 'default'" in warnings[0].msg and "QueueRouter" in warnings[0].hint
    if on_queue:  # the routed test databases: the tables were migrated to "queue" only
        assert "pgjobs_job" in pgjobs_tables("queue")
        assert rows("queue", "SELECT to_regclass('auth_user') IS NULL") == [(True,)]


def test_every_command_takes_database(settings):
    settings.PGJOBS = {**settings.PGJOBS, "DATABASE": "default"}
    enqueue("test.echo", {"n": 1}, using="queue")
    call_command("pgjobs_stats", "--database", "queue", "--json", stdout=(out := StringIO()))
    assert json.loads(out.getvalue())["queues"][0]["due"] == 1
    with pytest.raises(SystemExit):
        call_command("pgjobs_health", "--database", "queue", "--json", stdout=(out := StringIO()))
    assert "1 jobs are due" in json.loads(out.getvalue())["problems"][0]
    call_command("pgjobs_queue", "--database", "queue", "pause", "default", stdout=StringIO())
    assert rows("queue", "SELECT name, paused FROM pgjobs_queue") == [("default", True)]
    call_command("pgjobs_prune", "--database", "queue", "--dry-run", stdout=(out := StringIO()))
    assert "would delete 0 COMPLETED" in out.getvalue()


def test_the_key_lookup_uses_its_index():
    from django_pgjobs.on_commit import _FIND_KEY

    rows(
        "queue",
        "INSERT INTO pgjobs_job (type, status, unique_key, finished_at) SELECT "
        "'test.noop', 'COMPLETED', 'k' || i, now() FROM generate_series(1, 20000) i",
    )
    rows("queue", "ANALYZE pgjobs_job")
    plan = "\n".join(r[0] for r in rows("queue", "EXPLAIN " + _FIND_KEY, ["k77"]))
    assert "pgjobs_job_unique_key_idx" in plan and "Seq Scan" not in plan, plan
