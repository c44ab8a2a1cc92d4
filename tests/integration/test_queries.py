"""The state-changing statements, one by one: claim, finalize, heartbeat, release, reap."""

import uuid

import pytest

from django_pgjobs import enqueue, enqueue_many, queries
from django_pgjobs.models import Job
from django_pgjobs.queries import Completion
from django_pgjobs.worker.maintenance import reaped_fate
from tests.conftest import logged_sql, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ["test.echo", "test.behave", "test.noop"]


def claim(limit=10, queues=None, types=TYPES, lease=30.0, worker="w1"):
    return queries.claim(
        worker_id=worker, types=types, queues=queues, limit=limit, lease_seconds=lease
    )


def test_claim_takes_exactly_the_limit_and_counts_the_attempt():
    enqueue_many("test.echo", [{"i": i} for i in range(25)])
    rows = claim(limit=10)
    assert len(rows) == 10
    assert all(r.attempts == 1 for r in rows)
    assert Job.objects.filter(status="RUNNING").count() == 10
    tokens = {r.lease_token for r in rows}
    assert len(tokens) == 10  # one fresh token per job
    assert (
        sql_one(
            "SELECT count(*) FROM pgjobs_job WHERE status='RUNNING' "
            "AND locked_by='w1' AND lease_expires_at > now() + interval '29 seconds'"
        )
        == 10
    )


def test_claim_order_is_priority_then_fifo():
    low = enqueue("test.echo", {}, priority=-5)
    a = enqueue("test.echo", {})
    b = enqueue("test.echo", {})
    high = enqueue("test.echo", {}, priority=10)
    assert [r.id for r in claim(limit=4)] == [high.id, a.id, b.id, low.id]


def test_claim_skips_future_jobs_other_queues_and_unknown_types():
    enqueue("test.echo", {}, run_after=3600)
    enqueue("test.echo", {}, queue="other")
    sql("INSERT INTO pgjobs_job (type) VALUES ('os.system')")
    due = enqueue("test.echo", {})
    assert [r.id for r in claim(queues=["default"])] == [due.id]
    assert claim(queues=["default"]) == []
    assert [r.type for r in claim(queues=None)] == ["test.echo"]  # 'other' queue, not os.system
    assert Job.objects.get(type="os.system").status == "PENDING"


def test_finalize_applies_only_with_the_right_token_and_attempt():
    enqueue("test.echo", {})
    (row,) = claim()
    wrong = Completion(id=row.id, token=uuid.uuid4(), attempt=1, status="COMPLETED")
    stale_attempt = Completion(id=row.id, token=row.lease_token, attempt=2, status="COMPLETED")
    assert queries.finalize([wrong, stale_attempt]) == set()
    assert Job.objects.get(pk=row.id).status == "RUNNING"
    good = Completion(
        id=row.id,
        token=row.lease_token,
        attempt=1,
        status="COMPLETED",
        result={"rows": 3},
        duration_ms=12,
    )
    assert queries.finalize([good]) == {row.id}
    job = Job.objects.get(pk=row.id)
    assert (job.status, job.result, job.duration_ms, job.lease_token) == (
        "COMPLETED",
        {"rows": 3},
        12,
        None,
    )
    assert (job.finished_at - job.started_at).total_seconds() == pytest.approx(0.012, abs=0.001)
    # A second finalize of the same run (duplicate delivery) changes nothing.
    assert queries.finalize([good]) == set()


def test_result_is_merged_not_replaced():
    job = enqueue("test.echo", {})
    Job.objects.filter(pk=job.id).update(result={"kept": 1, "rows": 0})
    (row,) = claim()
    queries.finalize(
        [
            Completion(
                id=row.id, token=row.lease_token, attempt=1, status="COMPLETED", result={"rows": 5}
            )
        ]
    )
    assert Job.objects.get(pk=job.id).result == {"kept": 1, "rows": 5}


def test_retry_sets_run_after_from_the_database_clock():
    enqueue("test.echo", {})
    (row,) = claim()
    queries.finalize(
        [
            Completion(
                id=row.id,
                token=row.lease_token,
                attempt=1,
                status="PENDING",
                error="boom",
                delay=120.0,
            )
        ]
    )
    job = Job.objects.get(pk=row.id)
    assert job.status == "PENDING" and job.attempts == 1 and job.error == "boom"
    wait = sql_one(
        "SELECT extract(epoch FROM run_after - updated_at) FROM pgjobs_job WHERE id=%s", [row.id]
    )
    assert float(wait) == pytest.approx(120.0, abs=0.5)
    assert job.history[-1]["outcome"] == "PENDING" and job.history[-1]["attempt"] == 1
    assert claim() == []  # not due yet


def test_heartbeat_extends_held_leases_and_reports_lost_ones():
    enqueue_many("test.echo", [{}, {}])
    a, b = claim(lease=5)
    sql("UPDATE pgjobs_job SET lease_token = gen_random_uuid() WHERE id=%s", [b.id])  # taken over
    held = queries.heartbeat([(a.id, a.lease_token), (b.id, b.lease_token)], 60)
    assert held == {a.id: False}
    assert sql_one(
        "SELECT lease_expires_at > now() + interval '59 seconds' FROM pgjobs_job WHERE id=%s",
        [a.id],
    )


def test_heartbeat_reports_cancel_requests():
    enqueue("test.echo", {})
    (row,) = claim()
    assert queries.cancel([row.id]) == ([], [row.id])
    assert queries.heartbeat([(row.id, row.lease_token)], 30) == {row.id: True}


def test_release_refunds_the_attempt():
    enqueue("test.echo", {})
    (row,) = claim()
    assert queries.release([(row.id, row.lease_token)], reason="shutdown") == {row.id}
    job = Job.objects.get(pk=row.id)
    assert (job.status, job.attempts, job.lease_token) == ("PENDING", 0, None)
    assert job.history[-1]["outcome"] == "released"
    assert [r.id for r in claim()] == [row.id]


def test_reap_requeues_expired_leases_with_backoff():
    enqueue("test.echo", {})
    (row,) = claim()
    sql("UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 second'")
    reaped = queries.reap(reaped_fate)
    assert [(r[0], r[2]) for r in reaped] == [(row.id, "PENDING")]
    job = Job.objects.get(pk=row.id)
    assert job.attempts == 1 and "lease expired" in job.error and job.lease_token is None
    # The late finalize of the dead run is refused: the reaper took the job over.
    late = Completion(id=row.id, token=row.lease_token, attempt=1, status="COMPLETED")
    assert queries.finalize([late]) == set()
    assert Job.objects.get(pk=row.id).status == "PENDING"


def test_reap_fails_jobs_out_of_attempts():
    enqueue("test.echo", {}, max_attempts=1)
    claim()
    sql("UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 second'")
    assert [r[2] for r in queries.reap(reaped_fate)] == ["FAILED"]
    job = Job.objects.get()
    assert job.status == "FAILED" and job.finished_at is not None and "1/1" in job.error


def test_reap_leaves_live_leases_and_finished_jobs_alone():
    enqueue_many("test.echo", [{}, {}])
    a, b = claim()
    queries.finalize([Completion(id=a.id, token=a.lease_token, attempt=1, status="COMPLETED")])
    assert queries.reap(reaped_fate) == []
    assert Job.objects.get(pk=a.id).status == "COMPLETED"
    assert Job.objects.get(pk=b.id).status == "RUNNING"


def test_reaper_never_overwrites_a_completion_race_loop():
    """Finalize and reap race on the same expired lease, 100 times: exactly one of them wins."""
    for i in range(100):
        enqueue("test.echo", {"i": i})
        (row,) = claim()
        sql(
            "UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 second' WHERE id=%s",
            [row.id],
        )
        done = Completion(id=row.id, token=row.lease_token, attempt=1, status="COMPLETED")
        if i % 2:
            won_finalize = queries.finalize([done]) == {row.id}
            won_reap = bool(queries.reap(reaped_fate))
        else:
            won_reap = bool(queries.reap(reaped_fate))
            won_finalize = queries.finalize([done]) == {row.id}
        assert won_finalize != won_reap
        status = Job.objects.get(pk=row.id).status
        assert status == ("COMPLETED" if won_finalize else "PENDING")
        Job.objects.filter(pk=row.id).delete()


def test_manual_retry_and_cancel():
    enqueue_many("test.echo", [{}, {}, {}])
    a, b, c = claim()
    queries.finalize(
        [Completion(id=a.id, token=a.lease_token, attempt=1, status="FAILED", error="x")]
    )
    assert queries.retry_now([a.id, b.id]) == [a.id]  # b is running: skipped
    job = Job.objects.get(pk=a.id)
    assert (job.status, job.attempts) == ("PENDING", 0)
    assert queries.cancel([a.id]) == ([a.id], [])
    assert Job.objects.get(pk=a.id).status == "CANCELLED"


@pytest.mark.parametrize("prepared", [True, False])
def test_finalize_and_claim_raises_djangos_errors_when_the_connection_is_gone(settings, prepared):
    """The pipelined statements fail at the sync, outside Django's cursor: still wrapped, so
    the worker's `except OperationalError` (django.db) sees them and reconnects."""
    from django.db import OperationalError, connection

    settings.PGJOBS = {"PREPARED_STATEMENTS": prepared}
    enqueue_many("test.echo", [{}] * 3)
    rows = claim(limit=1)
    done = [Completion(id=rows[0].id, token=rows[0].lease_token, attempt=1, status="COMPLETED")]
    pid = sql_one("SELECT pg_backend_pid()")
    import psycopg

    with psycopg.connect(_conninfo(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(OperationalError):
        queries.finalize_and_claim(
            done, worker_id="w1", types=TYPES, queues=None, limit=2, lease_seconds=30.0
        )
    connection.close()
    written, more = queries.finalize_and_claim(
        done, worker_id="w1", types=TYPES, queues=None, limit=2, lease_seconds=30.0
    )
    assert written == {rows[0].id} and len(more) == 2


def _conninfo() -> str:
    from django.db import connection

    p = connection.get_connection_params()
    return " ".join(
        f"{k}={v}"
        for k, v in p.items()
        if k in ("host", "port", "dbname", "user", "password") and v
    )


def test_pipelined_finalize_and_claim_is_seen_by_django_instrumentation():
    """Query logging (DEBUG, assertNumQueries) and execute_wrapper see both statements."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    enqueue_many("test.echo", [{}] * 3)
    rows = claim(limit=1)
    done = [Completion(id=rows[0].id, token=rows[0].lease_token, attempt=1, status="COMPLETED")]
    wrapped = []

    def wrapper(execute, sql_text, params, many, context):
        wrapped.append(sql_text)
        return execute(sql_text, params, many, context)

    with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(wrapper):
        written, more = queries.finalize_and_claim(
            done, worker_id="w1", types=TYPES, queues=None, limit=2, lease_seconds=30.0
        )
    assert written == {rows[0].id} and len(more) == 2
    assert len(captured.captured_queries) == 2 and len(wrapped) == 2
    assert "jsonb_to_recordset" in logged_sql(captured.captured_queries[0], wrapped[0])
    assert "SKIP LOCKED" in logged_sql(captured.captured_queries[1], wrapped[1])
