"""pgjobs_workflow and pgjobs_dependency rows: a workflow's own row, its edges (written once,
by the builder; resolved by the fan-in in queries.py), and what a step reads of its parents."""

from __future__ import annotations

import json
from typing import Any

from .. import db
from ..status import ACTIVE_STATUSES, JobStatus, sql_in
from ..tables import DEPENDENCY_TABLE, JOB_TABLE, WORKFLOW_TABLE

_INSERT_WORKFLOW_ROW = f"""
INSERT INTO {WORKFLOW_TABLE} (name, on_failure) VALUES (%s, %s) RETURNING id
"""

_INSERT_EDGES = f"""
INSERT INTO {DEPENDENCY_TABLE} (parent_id, child_id, mode)
SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[])
"""


def insert_workflow(name: str, on_failure: str, using: str | None = None) -> int:
    with db.cursor(using) as cur:
        cur.execute(_INSERT_WORKFLOW_ROW, [name, on_failure])
        return int(cur.fetchone()[0])


def insert_edges(parents: str, children: str, modes: str, using: str | None = None) -> None:
    """All the edges of a workflow, one statement; the columns as array literals."""
    with db.cursor(using) as cur:
        cur.execute(_INSERT_EDGES, [parents, children, modes])


# A step's parents: the edges into it (child index), then each parent by its primary key.
_UPSTREAM = f"""
SELECT p.id, p.step, p.status, p.result
FROM {DEPENDENCY_TABLE} d JOIN {JOB_TABLE} p ON p.id = d.parent_id
WHERE d.child_id = %(child)s AND (%(step)s::text IS NULL OR p.step = %(step)s)
  AND p.id > %(after)s
ORDER BY p.id
LIMIT %(limit)s
"""

_DEPENDENCIES = f"""
SELECT outcome, array_agg(parent_id ORDER BY parent_id)
FROM {DEPENDENCY_TABLE} WHERE child_id = %s GROUP BY 1
"""


def upstream(
    child: int, step: str | None, *, after: int = 0, limit: int = 1000, using: str | None = None
) -> list[tuple[int, str | None, str, Any]]:
    """(id, step, status, result) of ``child``'s parents (of ``step``), by id after ``after``."""
    with db.cursor(using) as cur:
        cur.execute(_UPSTREAM, {"child": child, "step": step, "after": after, "limit": limit})
        return [(r[0], r[1], r[2], db_json(r[3])) for r in cur.fetchall()]


def dependencies(child: int, using: str | None = None) -> dict[str, list[int]]:
    """``child``'s parents by outcome (a terminal status, or "open")."""
    with db.cursor(using) as cur:
        cur.execute(_DEPENDENCIES, [child])
        return {r[0] or "open": list(r[1]) for r in cur.fetchall()}


def db_json(value: Any) -> Any:
    """A jsonb column as Python (psycopg decodes it already; a str is decoded here)."""
    if isinstance(value, str):
        return json.loads(value)
    return value


_WAITING_OR_ACTIVE = sql_in(JobStatus.WAITING, *ACTIVE_STATUSES)
_ACTIVE_JOBS = f"""
SELECT id FROM {JOB_TABLE}
WHERE workflow_id = %s AND status IN {_WAITING_OR_ACTIVE}
ORDER BY id
"""


def active_jobs(workflow_id: int, using: str | None = None) -> list[int]:
    """The jobs of a workflow not yet ended (through the workflow index)."""
    with db.cursor(using) as cur:
        cur.execute(_ACTIVE_JOBS, [workflow_id])
        return [r[0] for r in cur.fetchall()]
