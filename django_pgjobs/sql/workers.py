"""pgjobs_worker rows: one per running worker, its heartbeat and counters, and when it is alive.

Liveness has one definition, here: a worker is alive while its last heartbeat is younger than
``ALIVE_LEASES`` of its own lease (its ``--lease``, recorded on its row; it beats every third of
one). Rows of workers silent for ``FORGET_LEASES`` of their lease are pruned (retention.py).
Rows written before the lease was recorded count with the ``LEASE_SECONDS`` setting.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from .. import conf, db
from ..tables import WORKER_TABLE

ALIVE_LEASES = 3  # alive: a heartbeat within this many of the worker's own leases
FORGET_LEASES = 10  # pruned: silent for this many of its leases

# The worker's own lease in seconds; %(lease)s: the setting, for rows that did not record one.
_LEASE = "COALESCE(lease_seconds, %(lease)s)"


def silent_since(leases: int, now: str = "now()") -> str:
    """SQL predicate: the row's last heartbeat is older than ``leases`` of its own lease."""
    return f"last_heartbeat < {now} - {int(leases)} * {_LEASE} * interval '1 second'"


ALIVE_SQL = f"NOT ({silent_since(ALIVE_LEASES)})"


def _params(**extra: Any) -> dict[str, Any]:
    return {"lease": float(conf.get("LEASE_SECONDS")), **extra}


def upsert_worker(
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    queues: list[str],
    concurrency: int,
    jobs_done: int,
    lease_seconds: float | None = None,
    loop_lag_seconds: float | None = None,
    using: str | None = None,
) -> None:
    """The worker's heartbeat: its row, with its counters and its event loop's worst lag."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""INSERT INTO {WORKER_TABLE}
                    (worker_id, hostname, pid, queues, concurrency, jobs_done, lease_seconds,
                     loop_lag_seconds, started_at, last_heartbeat)
                VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, now(), now())
                ON CONFLICT (worker_id) DO UPDATE
                SET last_heartbeat = now(), jobs_done = EXCLUDED.jobs_done,
                    lease_seconds = EXCLUDED.lease_seconds,
                    loop_lag_seconds = EXCLUDED.loop_lag_seconds""",
            [
                worker_id,
                hostname,
                pid,
                json.dumps(queues),
                concurrency,
                jobs_done,
                lease_seconds,
                loop_lag_seconds,
            ],
        )


def delete_worker(worker_id: str, using: str | None = None) -> None:
    with db.cursor(using) as cur:
        cur.execute(f"DELETE FROM {WORKER_TABLE} WHERE worker_id = %s", [worker_id])


def list_workers(using: str | None = None) -> list[tuple[Any, ...]]:
    """The 200 freshest rows: (worker_id, hostname, pid, queues, concurrency, started_at,
    last_heartbeat, jobs_done, seconds since the heartbeat, alive)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT worker_id, hostname, pid, queues, concurrency, started_at, last_heartbeat,
                       jobs_done, EXTRACT(EPOCH FROM now() - last_heartbeat)::float8, {ALIVE_SQL}
                FROM {WORKER_TABLE} ORDER BY last_heartbeat DESC LIMIT 200""",
            _params(),
        )
        # Django's cursor gives jsonb as text (JSONField decodes it itself): decode queues here.
        return [(*r[:3], _json(r[3]), *r[4:]) for r in cur.fetchall()]


def loop_lags(using: str | None = None) -> list[dict[str, Any]]:
    """Live workers with an event loop: the worst lag each reported with its last heartbeat."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT worker_id, hostname, pid, loop_lag_seconds FROM {WORKER_TABLE}
                WHERE loop_lag_seconds IS NOT NULL AND {ALIVE_SQL}
                ORDER BY loop_lag_seconds DESC, worker_id LIMIT 200""",
            _params(),
        )
        keys = ("worker_id", "hostname", "pid", "loop_lag_seconds")
        return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]


def count_alive(using: str | None = None) -> int:
    with db.cursor(using) as cur:
        cur.execute(f"SELECT count(*) FROM {WORKER_TABLE} WHERE {ALIVE_SQL}", _params())
        return cur.fetchone()[0]


_PRUNE_FORGOTTEN = f"""DELETE FROM {WORKER_TABLE} WHERE worker_id IN (
    SELECT worker_id FROM {WORKER_TABLE} WHERE {silent_since(FORGET_LEASES, "%(now)s")}
    LIMIT %(batch)s)"""


def prune_forgotten(
    now: datetime, *, batch: int, max_batches: int, using: str | None = None
) -> int:
    """Delete the rows of workers silent for FORGET_LEASES of their lease at ``now`` (killed,
    host lost: they never said goodbye); returns how many."""
    total = 0
    with db.cursor(using) as cur:
        for _ in range(max_batches):
            cur.execute(_PRUNE_FORGOTTEN, _params(now=now, batch=batch))
            total += cur.rowcount
            if cur.rowcount < batch:
                break
    return total


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value
