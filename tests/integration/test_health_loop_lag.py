"""The event loop's lag, from the worker's heartbeat to pgjobs_health (issue 31).

The heartbeat writes the worst lag since the previous one on the worker's row (sql/workers.py);
pgjobs_health lists it for live workers and is unhealthy past ``--max-loop-lag``.
"""

import io
import json

import pytest
from django.core.management import call_command

from django_pgjobs.health_checks import Thresholds, evaluate
from django_pgjobs.sql import workers
from tests.conftest import sql

pytestmark = pytest.mark.django_db


def health(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(
            "pgjobs_health", "--min-dead-tuples", "1000000000", *args, stdout=out, stderr=err
        )
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    return code, out.getvalue(), err.getvalue()


def beat(worker_id: str, lag: float | None) -> None:
    workers.upsert_worker(
        worker_id=worker_id,
        hostname="h",
        pid=1,
        queues=["*"],
        concurrency=4,
        jobs_done=0,
        lease_seconds=30.0,
        loop_lag_seconds=lag,
    )


def test_a_lag_past_the_threshold_is_named_with_its_worker():
    beat("w-blocked", 2.5)
    beat("w-fine", 0.01)
    beat("w-sync", None)  # no event loop: not listed
    code, out, _ = health("--json")
    doc = json.loads(out)
    assert code == 1
    assert [w["worker_id"] for w in doc["metrics"]["event_loops"]] == ["w-blocked", "w-fine"]
    assert doc["metrics"]["event_loops"][0]["loop_lag_seconds"] == 2.5
    assert doc["thresholds"]["max_loop_lag"] == 1.0
    (problem,) = doc["problems"]
    assert "event loop of worker w-blocked lagged 2.50 s (over 1 s)" in problem, problem
    assert "worker.loop_blocked" in problem


def test_the_threshold_moves_the_line_and_the_text_report_shows_the_lag():
    beat("w-blocked", 2.5)
    code, out, err = health("--max-loop-lag", "3")
    assert code == 0, err
    assert "event loop lag: w-blocked 2.500 s" in out


def test_the_next_heartbeat_overwrites_the_lag():
    beat("w", 2.5)
    beat("w", 0.02)
    assert health()[0] == 0


def test_a_silent_worker_lag_is_not_reported_and_no_loop_is_said():
    beat("w-dead", 9.0)
    sql("UPDATE pgjobs_worker SET last_heartbeat = now() - interval '1 hour'")
    code, out, err = health()
    assert code == 0, err
    assert "event loop lag: no live worker runs async handlers" in out


def test_the_rule_is_a_pure_function_of_the_metrics():
    loops = [{"worker_id": "w", "hostname": "h", "pid": 1, "loop_lag_seconds": 0.8}]
    metrics = {
        "tables": {},
        "oldest_transaction": None,
        "leases": {"expired": 0, "stale": 0, "grace_seconds": 30.0},
        "backlog": {"due": 0, "oldest_due_age_seconds": None},
        "unknown_types": [],
        "live_workers": 1,
        "event_loops": loops,
    }
    assert evaluate(metrics, Thresholds()) == []
    assert "lagged 0.80 s (over 0.5 s)" in evaluate(metrics, Thresholds(max_loop_lag=0.5))[0]
