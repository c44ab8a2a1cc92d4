"""What must still be true after any fault: checked at the end of every acceptance scenario.

    inv = Invariants.begin()              # before the scenario: remembers the deadlock count
    inv.track(enqueue(...).id, *ids)      # every job the scenario enqueued
    ...faults...
    inv.check(drained=True, min_lease=1)  # raises one AssertionError listing every violation

The checks read the jobs table and ``testapp_execution`` (one row per handler run of
``test.behave``, written when the run starts, unique on (job_id, attempt)):

- nothing lost: every tracked id still exists;
- drained: nothing is left PENDING or RUNNING (only where the scenario drains the queue);
- no two runs of a job overlap unless the earlier one's lease had expired (the reaper recorded
  ``lease_expired`` for that attempt and the later run started at least ``min_lease`` seconds
  after the earlier attempt was claimed);
- a COMPLETED job was finished by its last attempt, and no run has an attempt number above the
  job's (except a run released at the shutdown timeout, whose attempt was given back);
- attempts <= max_attempts; every FAILED job carries an error; a finished job holds no lease;
- no deadlock (``pg_stat_database.deadlocks`` did not move);
- workflows (workflow_invariants): no WAITING job whose edges are all resolved, no open edge
  whose parent ended, ``deps_open`` = open edges for every job, and no step run started before
  one of its dependencies finished.

``query`` is any ``(sql, params) -> rows`` function: the Django test connection by default, a
psycopg connection for a throwaway cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import sql

Query = Callable[..., list[tuple]]

# An earlier run may overlap a later one only when the reaper took its lease away: the later run
# then starts after the lease (>= min_lease seconds from the earlier claim) expired.
_OVERLAPS = """
WITH runs AS (
    SELECT e.job_id, e.attempt, e.started_at,
           COALESCE(e.finished_at,
                    (h.entry->>'started_at')::timestamptz
                      + ((h.entry->>'duration_ms')::bigint) * interval '1 millisecond'
                   ) AS ended_at,
           h.entry->>'outcome' AS outcome,
           (h.entry->>'started_at')::timestamptz AS claimed_at
    FROM testapp_execution e
    LEFT JOIN pgjobs_job j ON j.id = e.job_id
    LEFT JOIN LATERAL (
        SELECT x AS entry FROM jsonb_array_elements(j.history) x
        WHERE (x->>'attempt')::int = e.attempt
        ORDER BY (x->>'outcome') = 'lease_expired' DESC LIMIT 1
    ) h ON true
)
SELECT a.job_id, a.attempt, b.attempt, a.started_at, a.ended_at, b.started_at, a.outcome
FROM runs a JOIN runs b ON b.job_id = a.job_id AND b.attempt > a.attempt
WHERE b.started_at < COALESCE(a.ended_at, 'infinity')
  AND NOT COALESCE(a.outcome = 'lease_expired'
                   AND b.started_at >= a.claimed_at + %s * interval '1 second', false)
ORDER BY 1, 2, 3
LIMIT 20
"""

_COMPLETED_NOT_BY_LAST_ATTEMPT = """
SELECT j.id, j.attempts, array_agg(e.attempt ORDER BY e.attempt)
FROM pgjobs_job j JOIN testapp_execution e ON e.job_id = j.id
WHERE j.status IN ('COMPLETED', 'COMPLETED_WITH_ERRORS')
GROUP BY j.id, j.attempts
HAVING NOT bool_or(e.attempt = j.attempts AND e.finished_at IS NOT NULL)
LIMIT 20
"""

# A run interrupted at the shutdown timeout is released with its attempt given back: the only
# run allowed a number above the job's attempts (the history records the release).
_RUN_ABOVE_ATTEMPTS = """
SELECT e.job_id, e.attempt, j.attempts FROM testapp_execution e JOIN pgjobs_job j ON j.id = e.job_id
WHERE e.attempt > j.attempts
  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(j.history) h
                  WHERE h->>'outcome' = 'released' AND (h->>'attempt')::int = e.attempt)
LIMIT 20
"""


@dataclass
class Invariants:
    query: Query = sql
    deadlocks_before: int = 0
    ids: set[int] = field(default_factory=set)

    @classmethod
    def begin(cls, query: Query = sql) -> Invariants:
        return cls(query=query, deadlocks_before=_deadlocks(query))

    def track(self, *ids: int | Iterable[int]) -> Invariants:
        for item in ids:
            if isinstance(item, int):
                self.ids.add(item)
            else:
                self.ids.update(item)
        return self

    def violations(
        self,
        *,
        drained: bool = True,
        min_lease: float = 1.0,
        timing: bool = True,
        still_pending: Sequence[int] = (),
    ) -> list[str]:
        q = self.query
        found: list[str] = []

        if self.ids:
            present = {
                r[0] for r in q("SELECT id FROM pgjobs_job WHERE id = ANY(%s)", [sorted(self.ids)])
            }
            lost = sorted(self.ids - present)
            if lost:
                found.append(f"lost jobs (enqueued, no longer in the table): {lost[:20]}")
        if drained:
            left = q(
                "SELECT id, type, status, attempts FROM pgjobs_job "
                "WHERE status IN ('PENDING', 'RUNNING') AND NOT (id = ANY(%s)) "
                "ORDER BY id LIMIT 20",
                [list(still_pending)],
            )
            if left:
                found.append(f"not drained: jobs still PENDING/RUNNING: {left}")
        if not q("SELECT 1 FROM pg_constraint WHERE conname = 'execution_once_per_attempt'"):
            found.append("testapp_execution lost its unique (job_id, attempt) constraint")
        if timing:  # off where a worker's clock is deliberately skewed (the log uses its clock)
            rows = q(_OVERLAPS, [min_lease])
            if rows:
                found.append(
                    "overlapping runs of one job while its lease was valid "
                    f"(job, attempt a, attempt b, a started, a ended, b started, a outcome): {rows}"
                )
        rows = q(_COMPLETED_NOT_BY_LAST_ATTEMPT)
        if rows:
            found.append(
                f"COMPLETED jobs not finished by their last attempt (job, attempts, runs): {rows}"
            )
        rows = q(_RUN_ABOVE_ATTEMPTS)
        if rows:
            found.append(f"runs numbered above the job's attempts (job, run, attempts): {rows}")
        rows = q(
            "SELECT id, attempts, max_attempts FROM pgjobs_job "
            "WHERE attempts > max_attempts LIMIT 20"
        )
        if rows:
            found.append(f"attempts > max_attempts: {rows}")
        rows = q(
            "SELECT id FROM pgjobs_job WHERE status = 'FAILED' "
            "AND (error IS NULL OR error = '') LIMIT 20"
        )
        if rows:
            found.append(f"FAILED jobs without an error: {[r[0] for r in rows]}")
        rows = q(
            "SELECT id, status FROM pgjobs_job WHERE status NOT IN ('PENDING', 'RUNNING') "
            "AND (lease_token IS NOT NULL OR finished_at IS NULL) LIMIT 20"
        )
        if rows:
            found.append(f"finished jobs still holding a lease or without finished_at: {rows}")
        found += workflow_invariants(q)
        delta = _deadlocks(q) - self.deadlocks_before
        if delta:
            found.append(f"{delta} deadlock(s) during the scenario (pg_stat_database.deadlocks)")
        return found

    def check(self, **kwargs: Any) -> None:
        found = self.violations(**kwargs)
        assert not found, "invariants broken:\n- " + "\n- ".join(found)


_STUCK_WAITING = """
SELECT c.id FROM pgjobs_job c
WHERE c.status = 'WAITING'
  AND NOT EXISTS (SELECT 1 FROM pgjobs_dependency d WHERE d.child_id = c.id AND d.outcome IS NULL)
LIMIT 20
"""
_OPEN_EDGE_OF_ENDED = """
SELECT d.parent_id, d.child_id, p.status FROM pgjobs_dependency d
JOIN pgjobs_job p ON p.id = d.parent_id
WHERE d.outcome IS NULL
  AND p.status IN ('COMPLETED', 'COMPLETED_WITH_ERRORS', 'FAILED', 'CANCELLED')
LIMIT 20
"""
_MISCOUNTED = """
SELECT j.id, j.deps_open, count(d.child_id) FILTER (WHERE d.outcome IS NULL)
FROM pgjobs_job j LEFT JOIN pgjobs_dependency d ON d.child_id = j.id
WHERE j.workflow_id IS NOT NULL OR j.deps_open <> 0
GROUP BY j.id, j.deps_open
HAVING j.deps_open <> count(d.child_id) FILTER (WHERE d.outcome IS NULL)
LIMIT 20
"""
# Every run of a step (testapp_execution, or the job's last start) began after each of its
# dependencies had finished.
_EARLY_STEPS = """
SELECT c.id, p.id, p.finished_at, s.started_at FROM pgjobs_dependency d
JOIN pgjobs_job p ON p.id = d.parent_id
JOIN pgjobs_job c ON c.id = d.child_id
CROSS JOIN LATERAL (
    SELECT e.started_at FROM testapp_execution e WHERE e.job_id = c.id
    UNION ALL SELECT c.started_at WHERE c.started_at IS NOT NULL
) s
WHERE p.finished_at IS NULL OR s.started_at < p.finished_at
LIMIT 20
"""


def workflow_invariants(q: Query = sql) -> list[str]:
    """What the fan-in promises, read from the tables (empty when no workflow exists)."""
    found = []
    checks = (
        (_STUCK_WAITING, "WAITING jobs whose edges are all resolved (lost callbacks)"),
        (_OPEN_EDGE_OF_ENDED, "open edges whose parent ended (parent, child, status)"),
        (_MISCOUNTED, "deps_open differs from the open edges (job, deps_open, open edges)"),
        (_EARLY_STEPS, "steps started before a dependency finished (child, parent, ...)"),
    )
    for statement, what in checks:
        rows = q(statement)
        if rows:
            found.append(f"{what}: {rows}")
    return found


def _deadlocks(q: Query) -> int:
    q("SELECT pg_stat_clear_snapshot()")
    return int(q("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")[0][0])


def psycopg_query(conn: Any) -> Query:
    """A ``query`` function over an autocommit psycopg connection (a throwaway cluster)."""

    def run(statement: str, params: Any = None) -> list[tuple]:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    return run
