"""The invariant checker itself: each check fires on a fabricated violation (a checker that
cannot fail would prove nothing) and stays quiet on legitimate histories."""

import json
import threading

import pytest
from django.db import OperationalError, connections, transaction

from tests.conftest import sql, sql_one

from .invariants import Invariants

pytestmark = pytest.mark.django_db(transaction=True)


def job(status="COMPLETED", attempts=1, max_attempts=3, error=None, finished=True, history=()):
    return sql_one(
        "INSERT INTO pgjobs_job (type, status, attempts, max_attempts, error, finished_at, "
        "history) VALUES ('test.behave', %s, %s, %s, %s, CASE WHEN %s THEN now() END, "
        "%s::jsonb) RETURNING id",
        [status, attempts, max_attempts, error, finished, json.dumps(list(history))],
    )


def run(job_id, attempt, started, finished=None):
    """An execution row; times are seconds relative to a fixed instant."""
    sql(
        "INSERT INTO testapp_execution (job_id, attempt, worker, pid, started_at, finished_at) "
        "VALUES (%s, %s, 'w', 1, '2026-01-01'::timestamptz + %s * interval '1 second', "
        "'2026-01-01'::timestamptz + %s * interval '1 second')",
        [job_id, attempt, started, finished],
    )


def expired(attempt, claimed):
    return {
        "attempt": attempt,
        "outcome": "lease_expired",
        "started_at": f"2026-01-01T00:00:{claimed:06.3f}+00:00",
    }


def found(inv, **kwargs):
    return "\n".join(inv.violations(**kwargs))


def test_a_clean_history_passes():
    inv = Invariants.begin()
    a = job(attempts=2, history=[expired(1, 0)])
    run(a, 1, 0.1)  # killed: never finished
    run(a, 2, 5.0, 5.5)  # rescued 5 s later (lease 1 s)
    inv.track(a).check(min_lease=1)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda inv: inv.track(987654), "lost jobs"),
        (lambda inv: job(status="PENDING", finished=False), "not drained"),
        (lambda inv: (a := job(attempts=2), run(a, 1, 0, 3), run(a, 2, 1, 4)), "overlapping runs"),
        (
            lambda inv: (
                a := job(attempts=2, history=[expired(1, 0)]),
                run(a, 1, 0.1),
                run(a, 2, 0.5, 1),
            ),  # re-run before the 1 s lease could expire
            "overlapping runs",
        ),
        (lambda inv: (a := job(attempts=2), run(a, 1, 0, 1)), "not finished by their last"),
        (
            lambda inv: (a := job(attempts=1), run(a, 1, 0, 1), run(a, 2, 2, 3)),
            "runs numbered above",
        ),
        (
            lambda inv: job(status="FAILED", attempts=5, max_attempts=3, error="x"),
            "attempts > max_attempts",
        ),
        (lambda inv: job(status="FAILED", error=None), "FAILED jobs without an error"),
        (lambda inv: job(status="COMPLETED", finished=False), "without finished_at"),
    ],
    ids=[
        "lost",
        "not-drained",
        "overlap",
        "overlap-inside-lease",
        "completed-early",
        "run-above-attempts",
        "attempts",
        "failed-no-error",
        "unfinished",
    ],
)
def test_each_violation_is_reported(build, message):
    inv = Invariants.begin()
    build(inv)
    assert message in found(inv, min_lease=1)


def test_a_deadlock_is_reported():
    a, b = job(), job()
    inv = Invariants.begin()
    barrier = threading.Barrier(2)
    errors = []

    def lock(first, second):
        try:
            with transaction.atomic():
                sql("SELECT 1 FROM pgjobs_job WHERE id = %s FOR UPDATE", [first])
                barrier.wait()
                sql("SELECT 1 FROM pgjobs_job WHERE id = %s FOR UPDATE", [second])
        except OperationalError as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=lock, args=p) for p in ((a, b), (b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 1 and "deadlock" in str(errors[0])
    assert "deadlock(s) during the scenario" in found(inv)
