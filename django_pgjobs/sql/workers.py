"""pgjobs_worker rows: one per running worker, its heartbeat and counters."""

from __future__ import annotations

import json
from typing import Any

from .. import db
from ..tables import WORKER_TABLE


def upsert_worker(
    *, worker_id: str, hostname: str, pid: int, queues: list[str], concurrency: int,
    jobs_done: int, using: str | None = None,
) -> None:
    with db.cursor(using) as cur:
        cur.execute(
            f"""INSERT INTO {WORKER_TABLE}
                    (worker_id, hostname, pid, queues, concurrency, jobs_done,
                     started_at, last_heartbeat)
                VALUES (%s, %s, %s, %s::jsonb, %s, %s, now(), now())
                ON CONFLICT (worker_id) DO UPDATE
                SET last_heartbeat = now(), jobs_done = EXCLUDED.jobs_done""",
            [worker_id, hostname, pid, json.dumps(queues), concurrency, jobs_done],
        )


def delete_worker(worker_id: str, using: str | None = None) -> None:
    with db.cursor(using) as cur:
        cur.execute(f"DELETE FROM {WORKER_TABLE} WHERE worker_id = %s", [worker_id])


def list_workers(using: str | None = None) -> list[tuple[Any, ...]]:
    """The 200 freshest rows: (worker_id, hostname, pid, queues, concurrency, started_at,
    last_heartbeat, jobs_done, seconds since the heartbeat)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT worker_id, hostname, pid, queues, concurrency, started_at, last_heartbeat,
                       jobs_done, EXTRACT(EPOCH FROM now() - last_heartbeat)::float8
                FROM {WORKER_TABLE} ORDER BY last_heartbeat DESC LIMIT 200"""
        )
        # Django's cursor gives jsonb as text (JSONField decodes it itself): decode queues here.
        return [(*r[:3], _json(r[3]), *r[4:]) for r in cur.fetchall()]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value
