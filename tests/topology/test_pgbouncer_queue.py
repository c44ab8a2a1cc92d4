"""Every part of the queue through a real PgBouncer in transaction mode (pool of 3), in this
process: enqueue, unique keys, claim, heartbeat, finalize, reaper, queue limits, fair share,
the Tasks backend and the admin's actions, on the alias "pooled" (conftest.py)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgjobs import enqueue, enqueue_many, queries
from django_pgjobs.models import Job
from django_pgjobs.queries import Completion
from django_pgjobs.sql import queues
from django_pgjobs.worker.maintenance import reaped_fate
from tests.conftest import run_worker, sql, sql_one
from tests.support.admin import make_job

pytestmark = [pytest.mark.topology, pytest.mark.django_db(transaction=True)]


def pooled_settings(alias: str, **more: object):
    from django.conf import settings

    return override_settings(PGJOBS={**settings.PGJOBS, "DATABASE": alias, **more})


def server_pids(alias: str, n: int = 6) -> set[int]:
    """The server backends that answered ``n`` statements of ``alias``: more than one shows
    the statements really went through the pool."""
    from django.db import connections

    pids = set()
    for _ in range(n):
        with connections[alias].cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pids.add(cur.fetchone()[0])
    return pids


def test_enqueue_unique_keys_and_a_worker_through_the_pool(pooled):
    with pooled_settings(pooled):
        first = enqueue("test.behave", {"do": "ok"}, unique_key="k1", using=pooled)
        again = enqueue("test.behave", {"do": "ok"}, unique_key="k1", using=pooled)
        assert again.id == first.id and again.deduplicated
        ids = enqueue_many("test.behave", [{"do": "ok"}] * 30, using=pooled)
        worker = run_worker(using=pooled, concurrency=3)  # claim, finalize, services
    assert worker.finished_total == 31
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY 1") == [("COMPLETED", 31)]
    assert sql_one("SELECT count(*) FROM testapp_execution WHERE job_id = ANY(%s)", [ids]) == 30


def test_claim_heartbeat_finalize_and_reap_through_the_pool(pooled):
    with pooled_settings(pooled):
        enqueue_many("test.noop", [{}] * 3, using=pooled)
        rows = queries.claim(
            worker_id="w", types=["test.noop"], queues=None, limit=3, lease_seconds=30, using=pooled
        )
        assert len(rows) == 3
        held = [(r.id, r.lease_token) for r in rows]
        assert set(queries.heartbeat(held, 60, using=pooled)) == {r.id for r in rows}
        done = Completion(id=rows[0].id, token=rows[0].lease_token, attempt=1, status="COMPLETED")
        assert queries.finalize([done], using=pooled) == {rows[0].id}
        sql(
            "UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 s' "
            "WHERE status = 'RUNNING'"
        )
        reaped = queries.reap(reaped_fate, using=pooled)
    assert sorted(r[0] for r in reaped) == sorted(r.id for r in rows[1:])
    assert dict(sql("SELECT status, count(*) FROM pgjobs_job GROUP BY 1")) == {
        "COMPLETED": 1,
        "PENDING": 2,
    }


def test_queue_limit_and_fair_share_through_the_pool(pooled):
    with pooled_settings(pooled):
        queues.set_queue_limit("capped", 2, using=pooled)
        enqueue_many("test.noop", [{}] * 6, queue="capped", using=pooled)
        capped = queries.claim_limited(
            queue="capped",
            worker_id="w",
            types=["test.noop"],
            limit=5,
            lease_seconds=30,
            using=pooled,
        )
        assert len(capped) == 2  # the cap, under its advisory lock (a transaction's)
        enqueue_many("test.noop", [{}] * 20, tenant_id="big", using=pooled)
        enqueue_many("test.noop", [{}] * 2, tenant_id="small", using=pooled)
        fair = queries.claim(
            worker_id="w",
            types=["test.noop"],
            queues=["default"],
            limit=4,
            lease_seconds=30,
            fair=True,
            using=pooled,
        )
        assert sorted(r.tenant_id for r in fair) == ["big", "big", "small", "small"]
        sql(
            "UPDATE pgjobs_job SET status = 'PENDING', lease_token = NULL, "
            "lease_expires_at = NULL, attempts = 0, started_at = NULL WHERE status = 'RUNNING'"
        )
        run_worker(using=pooled, concurrency=3, fair_share=True)
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY 1") == [("COMPLETED", 28)]


def test_tasks_backend_through_the_pool(pooled):
    from tests.testapp.tasks import add

    with pooled_settings(pooled):
        result = add.enqueue(2, 3)
        run_worker(using=pooled)
        result.refresh()
    assert str(result.status).endswith("SUCCESSFUL") and result.return_value == 5


def test_admin_actions_through_the_pool(pooled, admin_client):
    from tests.integration.admin.test_actions import act, fresh, message

    failed, later, pending = make_job("FAILED"), make_job("PENDING"), make_job("PENDING")
    sql("UPDATE pgjobs_job SET run_after = now() + interval '1 hour' WHERE id = %s", [later.id])
    with pooled_settings(pooled):
        assert "Retry: 1 done" in message(act(admin_client, "retry_jobs", failed))
        assert "Run now: 1 done" in message(act(admin_client, "run_jobs_now", later))
        assert "Cancel: 1 done" in message(act(admin_client, "cancel_jobs", pending))
        assert "Duplicate: 1 done" in message(act(admin_client, "duplicate_jobs", failed))
    assert fresh(failed).status == "PENDING" and fresh(pending).status == "CANCELLED"
    assert Job.objects.filter(operated_by="admin:admin").count() == 1
    assert sql_one("SELECT run_after <= now() FROM pgjobs_job WHERE id = %s", [later.id])


def test_the_pool_is_really_shared_and_found(pooled, bouncer):
    """The alias goes through PgBouncer: found as pooled, and its statements land on
    different server backends once another client holds the last one used."""
    import psycopg
    from django.db import connections

    from django_pgjobs import db

    assert db.pooled(connections[pooled])
    holder = psycopg.connect(bouncer.url_for(connections[pooled].settings_dict["NAME"]))
    try:
        before = server_pids(pooled, 1)
        holder.execute("SELECT 1")  # BEGIN…: holds the server we just released (LIFO)
        assert server_pids(pooled, 1) != before
    finally:
        holder.close()


def test_nothing_of_ours_stays_on_a_server_connection_of_the_pool(pooled, bouncer):
    """Naming the session and the generic-plan switch are session state: through the pool
    neither is set (another client would inherit them from the server connection); on a
    direct connection both are (so this test can fail)."""
    import psycopg
    from django.db import connection, connections

    from django_pgjobs import db

    enqueue_many("test.noop", [{}] * 10_000)
    sql("ANALYZE pgjobs_job")  # statistics past GENERIC_PLANS_MIN_ROWS
    with pooled_settings(pooled, PREPARED_STATEMENTS=True):
        for alias in (pooled, "default"):
            connections[alias].ensure_connection()
            db.tag_session(connections[alias], "pgjobs:test:main")
            db.use_generic_plans(alias)
    assert sql("SHOW plan_cache_mode") == [("force_generic_plan",)]  # direct: set
    assert sql("SHOW application_name") == [("pgjobs:test:main",)]
    other = psycopg.connect(bouncer.url_for(connection.settings_dict["NAME"]), autocommit=True)
    try:  # the pool hands it the server connection "pooled" used last
        assert other.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        assert other.execute("SHOW application_name").fetchone() == ("",)
    finally:
        other.close()
