"""Real `runjobs` processes behind a real PgBouncer in transaction mode (pool of 3): prepared
statements left on, exactly once with four workers, a kill -9 rescued, cron once per tick,
the listener's direct connection, the connections a worker uses, a pooler that refuses."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time

import psycopg
import pytest
from django.db import connection, connections
from django.test import override_settings

from django_pgjobs import db, enqueue, enqueue_many
from django_pgjobs.models import Job, ScheduleFire
from tests.acceptance.conftest import assert_backs_off, db_errors
from tests.acceptance.invariants import Invariants
from tests.concurrency.test_scheduler_processes import stop
from tests.conftest import ROOT, eventually, sql, sql_one

sys.path.insert(0, str(ROOT / "scripts"))
from pgbouncer import PgBouncer  # noqa: E402

pytestmark = [pytest.mark.topology, pytest.mark.django_db(transaction=True)]

TROUBLE = re.compile(r"prepared statement \"|worker\.step_error|unexpected error|Traceback")


def test_a_prepared_statement_the_pooler_lost_fails_once_then_none_are_prepared(
    pooled, bouncer, caplog
):
    """Today's crash, reproduced: with PREPARED_STATEMENTS = True, a statement prepared on one
    server connection is executed on another (the pool gave the last one used to another
    client): `prepared statement "_pg3_0" does not exist`. Now that one call fails, says which
    settings to set, and the process goes on without prepared statements."""
    from django.conf import settings

    db._UNPREPARED.discard(pooled)
    holder = psycopg.connect(bouncer.url_for(connection.settings_dict["NAME"]))
    try:
        with override_settings(PGJOBS={**settings.PGJOBS, "PREPARED_STATEMENTS": True}):
            enqueue("test.noop", {}, using=pooled)  # prepared on the server it got
            holder.execute("SELECT 1")  # in a transaction: holds that server (LIFO)
            with (
                caplog.at_level(logging.ERROR, "django_pgjobs.db"),
                pytest.raises(Exception, match=r'prepared statement "_pg3_\d+" does not exist'),
            ):
                enqueue("test.noop", {}, using=pooled)
            assert "PGJOBS['PREPARED_STATEMENTS'] = 'auto'" in caplog.text
            assert "DISABLE_SERVER_SIDE_CURSORS" in caplog.text
            assert not db.prepares(connections[pooled])
            for _ in range(5):  # on whichever server: nothing prepared any more
                enqueue("test.noop", {}, using=pooled)
    finally:
        holder.close()
        db._UNPREPARED.discard(pooled)
    assert sql_one("SELECT count(*) FROM pgjobs_job") == 6


def test_four_workers_run_5000_jobs_exactly_once_through_the_pool(start_pooled):
    """Two workers with the documented settings (DISABLE_SERVER_SIDE_CURSORS), two with none
    (PREPARED_STATEMENTS "auto" finds the pooler): none prepares a statement, none fails a
    step, every job runs once, on attempt 1; this process enqueues meanwhile."""
    inv = Invariants.begin().track(
        enqueue_many("test.behave", [{"do": "ok", "i": i} for i in range(4000)])
    )
    workers = [
        start_pooled("--burst", "--concurrency", "2", "-v", "1", documented=i < 2) for i in range(4)
    ]
    inv.track(enqueue_many("test.behave", [{"do": "ok"}] * 1000))
    codes = [w.wait(timeout=240) for w in workers]
    outputs = [w.output() for w in workers]
    assert codes == [0, 0, 0, 0], [o[-3000:] for o in outputs]
    for out in outputs:
        assert not TROUBLE.search(out), out[-5000:]
    for out in outputs[2:]:  # found, not declared
        assert "reached through a connection pooler: prepared statements off" in out
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY status") == [("COMPLETED", 5000)]
    assert sql_one("SELECT count(*), count(DISTINCT job_id) FROM testapp_execution") == 5000
    assert sql_one("SELECT max(attempts) FROM pgjobs_job") == 1
    assert sql_one("SELECT count(DISTINCT pid) FROM testapp_execution") >= 3  # shared
    inv.check(drained=True)


def test_a_worker_killed_mid_drain_is_rescued_through_the_pool(start_pooled):
    inv = Invariants.begin().track(
        enqueue_many("test.behave", [{"do": "sleep", "seconds": 0.2}] * 40)
    )
    args = (
        "--concurrency",
        "3",
        "--lease",
        "2",
        "--reap-interval",
        "0.5",
        "--poll-interval",
        "0.2",
        "--prefetch",
        "0",
        "-v",
        "1",
    )
    victim = start_pooled(*args)
    eventually(
        lambda: (
            sql_one(
                "SELECT count(*) FROM pgjobs_job WHERE status = 'RUNNING' AND locked_by LIKE %s",
                [f"%:{victim.pid}:%"],
            )
            >= 2
        ),
        timeout=30,
        message="the victim holds running jobs",
    )
    victim.signal(signal.SIGKILL)
    victim.wait(timeout=10)
    rescuer = start_pooled(*args)
    eventually(
        lambda: sql("SELECT status, count(*) FROM pgjobs_job GROUP BY 1") == [("COMPLETED", 40)],
        timeout=90,
        interval=0.2,
        message="all 40 completed",
    )
    assert stop(rescuer) == 0, rescuer.output()[-3000:]
    assert (
        sql_one("SELECT count(*) FROM pgjobs_job WHERE history::text LIKE '%%lease_expired%%'") >= 1
    ), "nothing was rescued"
    assert not TROUBLE.search(rescuer.output()), rescuer.output()[-5000:]
    inv.check(drained=True, min_lease=2)


def test_four_workers_fire_each_tick_once_through_the_pool(start_pooled):
    pgjobs = {
        "SCHEDULER_INTERVAL": 0.2,
        "SCHEDULES": {
            "every-second": {
                "type": "test.noop",
                "cron": "* * * * * *",
                "timezone": "UTC",
                "catch_up": "all",
                "catch_up_window": 60,
            }
        },
    }
    workers = [
        start_pooled("--poll-interval", "0.2", "--concurrency", "1", "-v", "1", pgjobs=pgjobs)
        for _ in range(4)
    ]
    eventually(lambda: ScheduleFire.objects.count() >= 5, timeout=90, message="5 ticks fired")
    for w in workers:
        assert stop(w) == 0, w.output()[-3000:]
    times = [f.fire_time for f in ScheduleFire.objects.order_by("fire_time")]
    assert len(times) == len(set(times)) >= 5
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [1.0] * (len(times) - 1)  # every second, none missing
    assert Job.objects.filter(operated_by="schedule:every-second").count() == len(times)
    for w in workers:
        assert not TROUBLE.search(w.output()), w.output()[-5000:]


def test_the_listener_listens_directly_and_without_it_the_worker_polls(start_pooled):
    """Behind the pool the worker polls (and says so); with LISTEN_DATABASE naming the direct
    connection, a NOTIFY wakes it long before its 30 s poll."""
    polling = start_pooled("--poll-interval", "30", "-v", "1")
    eventually(
        lambda: "worker.started" in polling.output() or " started: " in polling.output(),
        timeout=30,
        message="worker started",
    )
    assert "LISTEN cannot work through a transaction pooler" in polling.output()
    assert stop(polling) == 0
    listening = start_pooled(
        "--poll-interval", "30", "-v", "1", pgjobs={"LISTEN_DATABASE": "direct"}
    )
    eventually(
        lambda: sql_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            [f"pgjobs:%:{listening.pid}:%:listen"],
        ),
        timeout=30,
        message="the listener connected directly",
    )
    # past the listener's first wake-up and claim, which no row or lock marks: a pause, kept
    time.sleep(0.5)
    job = enqueue("test.noop", {})
    eventually(
        lambda: Job.objects.get(pk=job.id).status == "COMPLETED",
        timeout=10,
        message="woken by NOTIFY well before the 30 s poll",
    )
    assert "LISTEN cannot work" not in listening.output()
    assert stop(listening) == 0


def test_connections_of_one_worker_by_role(start_worker):
    """Direct: one connection for the claim loop, one for the services, one for the listener,
    and one per handler thread that touched the database (here all three)."""
    enqueue_many("test.behave", [{"do": "sleep", "seconds": 0.05}] * 30)
    w = start_worker("--concurrency", "3", "--poll-interval", "0.2", "-v", "1")
    eventually(
        lambda: sql_one("SELECT count(*) FROM pgjobs_job WHERE status = 'COMPLETED'") == 30,
        timeout=60,
        message="30 jobs done",
    )
    roles = dict(
        sql(
            "SELECT split_part(application_name, ':', 5), count(*) "
            "FROM pg_stat_activity WHERE application_name LIKE %s GROUP BY 1",
            [f"pgjobs:%:{w.pid}:%"],
        )
    )
    assert stop(w) == 0
    assert roles == {"main": 1, "services": 1, "listen": 1, "exec": 3}, roles


def test_a_pooler_that_refuses_clients_makes_the_worker_back_off_and_lose_nothing(start_worker):
    """PgBouncer at its max_client_conn: the worker's connects are refused; it backs off,
    stays up, and runs every job once the pooler takes clients again. (Handlers that use the
    database need a connection too: refused, they raise, and their retry policy applies; see
    docs/topology.md. These jobs use none.)"""
    inv = Invariants.begin().track(enqueue_many("test.noop", [{}] * 10))
    with PgBouncer(os.environ["DATABASE_URL"], pool_size=3, max_client_conn=2) as full:
        name, hogs = connection.settings_dict["NAME"], []
        try:
            while True:  # PgBouncer lets in a client or two past max_client_conn: fill it
                try:
                    hogs.append(psycopg.connect(full.url_for(name), connect_timeout=5))
                except psycopg.OperationalError as exc:
                    assert "no more connections allowed" in str(exc)
                    break
                assert len(hogs) < 10, "max_client_conn is not enforced"
            env = {
                "PGJOBS_TEST_BOUNCER_URL": full.url_for(name),
                "PGJOBS_TEST_DISABLE_SSC": "1",
                "PGJOBS_TEST_PGJOBS": "{}",
            }
            w = start_worker(
                "--settings",
                "tests.topology.settings",
                "--concurrency",
                "2",
                "--poll-interval",
                "0.2",
                "-v",
                "1",
                env=env,
            )
            eventually(
                lambda: len(db_errors(w.output())) >= 3,
                timeout=30,
                message="three refusals reported",
            )
            errors = db_errors(w.output())
            assert all("no more connections allowed" in e.message for e in errors), errors
            assert_backs_off(errors)
        finally:
            for h in hogs:
                h.close()
        eventually(
            lambda: (
                sql("SELECT status, count(*) FROM pgjobs_job GROUP BY 1") == [("COMPLETED", 10)]
            ),
            timeout=60,
            interval=0.2,
            message="done after",
        )
        assert w.proc.poll() is None
        assert stop(w) == 0, w.output()[-3000:]
    inv.check(drained=True)
