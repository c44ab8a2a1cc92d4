"""What the admin's workflow page and dashboard read of workflows: a workflow's steps (counts by
state, and their first jobs), the edges between its steps, and the dashboard's counts. Read-only;
each statement goes through the workflow index or a small partial index, never per job."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import db
from ..status import FAILED_SQL, RUNNING_SQL
from ..tables import DEPENDENCY_TABLE, JOB_TABLE

JOBS_SHOWN = 10  # jobs listed per step, failed and running first; the others are counted
TEXT_CHARS = 300  # of a job's result and error


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One job of a step, or (``listed`` false) only a state's count of a wide step."""

    step: str
    status: str
    count: int  # jobs of this step in this status
    listed: bool
    id: int
    type: str
    attempts: int
    max_attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    result: str | None
    error: str | None
    step_attempts: int  # of all the step's jobs
    step_started: datetime | None
    step_finished: datetime | None  # the last end, once every job of the step ended


# Through the workflow index: every job's (id, step, status), numbered and counted per step
# and state; then, by primary key, the first JOBS_SHOWN of each step (failed, running, then by
# id) and one per state.
_MEMBERS = f"""
WITH s AS (
    SELECT id, step, status,
           row_number() OVER (PARTITION BY step ORDER BY
               CASE status WHEN {FAILED_SQL} THEN 0 WHEN {RUNNING_SQL} THEN 1 ELSE 2 END, id) AS rn,
           row_number() OVER (PARTITION BY step, status ORDER BY id) AS srn,
           count(*) OVER (PARTITION BY step, status) AS n,
           sum(attempts) OVER (PARTITION BY step) AS step_attempts,
           min(started_at) OVER (PARTITION BY step) AS step_started,
           CASE WHEN bool_and(finished_at IS NOT NULL) OVER (PARTITION BY step)
                THEN max(finished_at) OVER (PARTITION BY step) END AS step_finished
    FROM {JOB_TABLE} WHERE workflow_id = %(wf)s
)
SELECT s.step, s.status, s.n, s.rn <= %(shown)s, j.id, j.type, j.attempts, j.max_attempts,
       j.started_at, j.finished_at, j.duration_ms, j.result, j.error,
       s.step_attempts, s.step_started, s.step_finished
FROM s CROSS JOIN LATERAL (
    SELECT id, type, attempts, max_attempts, started_at, finished_at, duration_ms,
           left(result::text, %(chars)s) AS result, right(error, %(chars)s) AS error
    FROM {JOB_TABLE} WHERE id = s.id OFFSET 0  -- OFFSET 0: by primary key, never a scan
) j
WHERE s.rn <= %(shown)s OR s.srn = 1
ORDER BY s.step, s.rn
"""

# The steps each step waits for: the edges of one job per step (a step's jobs share their
# dependencies: the builder resolves them per step), each parent by its primary key.
_STEP_EDGES = f"""
SELECT DISTINCT p.step, r.step, d.mode
FROM (SELECT DISTINCT ON (step) step, id FROM {JOB_TABLE}
      WHERE workflow_id = %(wf)s ORDER BY step, id) r
JOIN {DEPENDENCY_TABLE} d ON d.child_id = r.id
JOIN {JOB_TABLE} p ON p.id = d.parent_id
WHERE p.workflow_id = %(wf)s
ORDER BY 1, 2
"""


def members(workflow_id: int, using: str | None = None) -> list[MemberRow]:
    with db.cursor(using) as cur:
        cur.execute(_MEMBERS, {"wf": workflow_id, "shown": JOBS_SHOWN, "chars": TEXT_CHARS})
        return [MemberRow(*r) for r in cur.fetchall()]


def step_edges(workflow_id: int, using: str | None = None) -> list[tuple[str, str, str]]:
    """(parent step, child step, mode) of a workflow's dependencies."""
    with db.cursor(using) as cur:
        cur.execute(_STEP_EDGES, {"wf": workflow_id})
        return [(r[0], r[1], r[2]) for r in cur.fetchall()]


COUNT_UP_TO = 10_000

# Running jobs (the lease index) and failed jobs of the window (the problem index): few rows.
_DASHBOARD_COUNTS = f"""
SELECT
  (SELECT count(DISTINCT workflow_id) FROM (
      SELECT workflow_id FROM {JOB_TABLE}
      WHERE status = {RUNNING_SQL} AND workflow_id IS NOT NULL LIMIT %(cap)s) r),
  (SELECT count(DISTINCT workflow_id) FROM (
      SELECT workflow_id FROM {JOB_TABLE}
      WHERE status = {FAILED_SQL} AND workflow_id IS NOT NULL
        AND finished_at > now() - %(hours)s * interval '1 hour' LIMIT %(cap)s) f)
"""


def dashboard_counts(hours: int, using: str | None = None) -> dict[str, Any]:
    """Workflows with a running job now, workflows with a job failed in the window."""
    with db.cursor(using) as cur:
        cur.execute(_DASHBOARD_COUNTS, {"hours": hours, "cap": COUNT_UP_TO})
        running, failed = cur.fetchone()
        return {"running": running, "failed": failed}
