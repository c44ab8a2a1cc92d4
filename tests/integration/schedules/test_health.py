"""manage.py pgjobs_health: measurements from PostgreSQL, rules as a pure function."""

import io
import json

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from django_pgjobs.health_checks import Thresholds, evaluate
from tests.conftest import sql

pytestmark = pytest.mark.django_db


def healthy_metrics(**changes: object) -> dict:
    metrics = {
        "tables": {
            "pgjobs_job": {"total_bytes": 2**20, "live_tuples": 100_000, "dead_tuples": 5_000}
        },
        "oldest_transaction": {
            "pid": 7,
            "age_seconds": 2.0,
            "state": "active",
            "application_name": "app",
        },
        "leases": {"expired": 1, "stale": 0, "grace_seconds": 30.0},
        "backlog": {"due": 3, "oldest_due_age_seconds": 1.5},
        "unknown_types": [],
        "live_workers": 2,
        "old_snapshots": [],
    }
    for key, value in changes.items():
        metrics[key] = value
    return metrics


def test_healthy_metrics_raise_no_problem():
    assert evaluate(healthy_metrics(), Thresholds()) == []


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        (
            {"tables": {"pgjobs_job": {"live_tuples": 10_000, "dead_tuples": 50_000}}},
            "50000 dead tuples",
        ),
        (
            {
                "oldest_transaction": {
                    "pid": 99,
                    "age_seconds": 4000.0,
                    "state": "idle in transaction",
                    "application_name": "psql",
                }
            },
            "open for 4000 s (pid 99",
        ),
        ({"leases": {"expired": 3, "stale": 2, "grace_seconds": 30.0}}, "2 RUNNING jobs"),
        ({"backlog": {"due": 50, "oldest_due_age_seconds": 900.0}}, "waited 900 s"),
        ({"live_workers": 0}, "no worker has sent a heartbeat"),
        ({"unknown_types": [{"type": "old.type", "due": 4}]}, "old.type (4)"),
        (
            {
                "old_snapshots": [
                    {
                        "pid": 42,
                        "age_seconds": 480.0,
                        "state": "idle in transaction",
                        "application_name": "report",
                        "user": "bi",
                    }
                ]
            },
            "pid 42 (application 'report', user 'bi', idle in transaction) has held back vacuum "
            "for 480 s",
        ),
    ],
)
def test_each_rule_reports_its_reason(changes, text):
    problems = evaluate(healthy_metrics(**changes), Thresholds())
    assert len(problems) == 1 and text in problems[0], problems


def test_a_snapshot_holder_past_the_transaction_age_is_reported_once():
    tx = {
        "pid": 42,
        "age_seconds": 4000.0,
        "state": "idle in transaction",
        "application_name": "report",
        "user": "bi",
    }
    problems = evaluate(healthy_metrics(oldest_transaction=tx, old_snapshots=[tx]), Thresholds())
    assert len(problems) == 1 and "held back vacuum" in problems[0], problems
    assert evaluate(healthy_metrics(old_snapshots=[tx]), Thresholds(max_snapshot_age=5000)) == []


def test_thresholds_move_the_lines():
    few_dead = healthy_metrics(tables={"pgjobs_job": {"live_tuples": 10, "dead_tuples": 900}})
    assert evaluate(few_dead, Thresholds()) == []  # under min_dead_tuples
    assert evaluate(few_dead, Thresholds(min_dead_tuples=100)) != []
    unknown = healthy_metrics(unknown_types=[{"type": "x", "due": 1}])
    assert evaluate(unknown, Thresholds(allow_unknown_types=True)) == []
    assert evaluate(healthy_metrics(), Thresholds(max_table_mb=0.5)) != []
    assert evaluate(healthy_metrics(), Thresholds(max_due_age=1.0)) != []


# --- the command against the database ----------------------------------------------------------


# The dead-tuple rule reads pg_stat_user_tables, which counts what earlier tests left behind in
# the test database: it is covered by the evaluate() tests above and switched off here.
IGNORE_DEAD_TUPLES = ("--min-dead-tuples", "2000000000")


def health(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("pgjobs_health", *IGNORE_DEAD_TUPLES, *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    return code, out.getvalue(), err.getvalue()


def test_an_empty_queue_is_healthy():
    code, out, err = health()
    assert code == 0, err
    assert "pgjobs_job:" in out and "index pgjobs_job_claim_idx" in out
    assert out.rstrip().endswith("healthy") and err == ""


def test_json_output_carries_metrics_and_verdict():
    code, out, _ = health("--json")
    doc = json.loads(out)
    assert code == 0 and doc["healthy"] is True and doc["problems"] == []
    assert set(doc["metrics"]) == {
        "tables",
        "indexes",
        "oldest_transaction",
        "old_snapshots",
        "leases",
        "backlog",
        "unknown_types",
        "live_workers",
        "event_loops",
    }
    assert doc["metrics"]["tables"]["pgjobs_job"]["total_bytes"] > 0
    assert doc["thresholds"]["stale_lease_grace"] == 30.0  # 3 x REAP_INTERVAL


def test_a_stale_lease_makes_it_unhealthy():
    sql(
        "INSERT INTO pgjobs_job (type, status, lease_token, lease_expires_at) "
        "VALUES ('test.noop', 'RUNNING', gen_random_uuid(), now() - interval '1 hour')"
    )
    code, _, err = health()
    assert code == 1 and "UNHEALTHY: 1 RUNNING jobs have a lease expired" in err
    assert health("--stale-lease-grace", "7200")[0] == 0


def test_an_old_backlog_without_workers_makes_it_unhealthy():
    sql("INSERT INTO pgjobs_job (type, run_after) VALUES ('test.noop', now() - interval '1 hour')")
    code, out, _ = health("--json")
    doc = json.loads(out)
    assert code == 1
    assert any("oldest due job has waited" in p for p in doc["problems"])
    assert any("no worker has sent a heartbeat" in p for p in doc["problems"])
    assert doc["metrics"]["backlog"]["due"] == 1


def test_a_paused_queue_does_not_count_as_backlog():
    sql(
        "INSERT INTO pgjobs_job (type, queue, run_after) "
        "VALUES ('test.noop', 'held', now() - interval '1 hour')"
    )
    sql("INSERT INTO pgjobs_queue (name, paused) VALUES ('held', true)")
    assert health()[0] == 0


def test_unknown_types_are_reported_unless_allowed():
    sql("INSERT INTO pgjobs_job (type, run_after) VALUES ('gone.type', now() - interval '1 hour')")
    code, _, err = health()
    assert code == 1 and "gone.type (1)" in err
    assert health("--allow-unknown-types")[0] == 0  # nor backlog: no handler here can run it


@pytest.mark.django_db(transaction=True)
def test_a_long_open_transaction_is_found():
    dsn = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k in ("host", "port", "user", "password", "dbname")
    }
    with psycopg.connect(**dsn, application_name="forgotten-shell") as other:
        other.execute("SELECT txid_current()")  # stays open: psycopg does not autocommit
        sql("SELECT pg_sleep(0.2)")
        code, out, err = health("--max-transaction-age", "0.1")
        assert code == 1
        assert f"pid {other.info.backend_pid}" in err and "forgotten-shell" in err
        other.rollback()
    assert health()[0] == 0


@pytest.mark.django_db(transaction=True)
def test_a_held_snapshot_is_flagged_while_it_lasts():
    dsn = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k in ("host", "port", "user", "password", "dbname")
    }
    with psycopg.connect(**dsn, application_name="nightly-report") as other:
        other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT count(*) FROM pgjobs_job")  # the snapshot now holds back vacuum
        sql("SELECT pg_sleep(0.3)")
        pid = other.info.backend_pid
        code, out, err = health("--max-snapshot-age", "0.2")
        assert code == 1 and f"pid {pid} (application 'nightly-report'" in err, err
        assert f"holds back vacuum: pid {pid}" in out
        code, out, _ = health("--json", "--max-snapshot-age", "0.2")
        held = json.loads(out)["metrics"]["old_snapshots"]
        assert [h["pid"] for h in held] == [pid] and held[0]["age_seconds"] >= 0.3
        assert health()[0] == 0  # under the default 60 s
        other.rollback()
        other.execute("SELECT 1")  # autocommit off: this opens a new, young transaction
        assert health("--max-snapshot-age", "0.2")[0] == 0


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_carries_the_held_snapshot():
    from django_pgjobs import dashboard, health_checks

    dsn = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k in ("host", "port", "user", "password", "dbname")
    }
    with psycopg.connect(**dsn, application_name="forgotten-psql") as other:
        other.execute("SELECT txid_current()")
        sql("SELECT pg_sleep(0.3)")
        under_default = dashboard.build()["health"]  # 0.3 s is under the default 60 s
        data = health_checks.summary(health_checks.Thresholds(max_snapshot_age=0.2))
        other.rollback()
    assert under_default["old_snapshots"] == [] and set(under_default) == set(data)
    assert data["healthy"] is False
    assert [h["application_name"] for h in data["old_snapshots"]] == ["forgotten-psql"]
    assert any("forgotten-psql" in p for p in data["problems"])
