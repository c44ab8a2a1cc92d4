"""What ``manage.py pgjobs_health`` measures, and when it calls the queue unhealthy.

:func:`collect` reads the database (sizes, dead tuples, long transactions, leases, backlog);
:func:`evaluate` is a pure function of those metrics and the :class:`Thresholds`, so each rule
is tested without staging a real incident.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.db import InterfaceError, OperationalError, connections

from . import __version__, conf, db, registry
from .exceptions import NotMigrated
from .sql import workers as sql_workers
from .status import PENDING_SQL, RUNNING_SQL
from .tables import JOB_TABLE, QUEUE_TABLE, SCHEDULE_FIRE_TABLE, SCHEDULE_TABLE, WORKER_TABLE

TABLES = (JOB_TABLE, WORKER_TABLE, QUEUE_TABLE, SCHEDULE_TABLE, SCHEDULE_FIRE_TABLE)


@dataclass
class Thresholds:
    max_due_age: float = 300.0  # s the oldest due job (known type, open queue) may wait
    max_transaction_age: float = 600.0  # s: a longer transaction holds back vacuum
    max_snapshot_age: float = 60.0  # s a backend may hold back vacuum (a snapshot or an xid)
    max_dead_ratio: float = 0.5  # dead / (live + dead) tuples of the jobs table ...
    min_dead_tuples: int = 10_000  # ... counted only past this many dead tuples
    stale_lease_grace: float | None = None  # s past expiry; None: 3 x REAP_INTERVAL
    allow_unknown_types: bool = False  # due jobs no handler knows: unhealthy unless allowed
    max_table_mb: float | None = None  # total size of the jobs table (None: not checked)
    max_loop_lag: float = 1.0  # s a live worker's event loop (async handlers) may lag

    def grace(self) -> float:
        if self.stale_lease_grace is not None:
            return self.stale_lease_grace
        return 3 * float(conf.get("REAP_INTERVAL"))


def collect(thresholds: Thresholds | None = None, using: str | None = None) -> dict[str, Any]:
    t = thresholds or Thresholds()
    alias = using or conf.get("DATABASE")
    with connections[alias].cursor() as cur:
        return {
            "tables": _tables(cur),
            "indexes": _indexes(cur),
            "oldest_transaction": _oldest_transaction(cur),
            "old_snapshots": old_snapshots(cur, t.max_snapshot_age),
            "leases": _leases(cur, t.grace()),
            "backlog": _backlog(cur),
            "unknown_types": [
                {"type": name, "due": n}
                for name, n in unknown_due_types(registry.registered_types(), using=alias)
            ],
            "live_workers": sql_workers.count_alive(alias),
            "event_loops": sql_workers.loop_lags(alias),
        }


def evaluate(metrics: dict[str, Any], thresholds: Thresholds) -> list[str]:
    """The reasons the queue is unhealthy; empty when it is healthy."""
    t = thresholds
    problems = []
    jobs = metrics["tables"].get(JOB_TABLE) or {}
    dead, live = jobs.get("dead_tuples") or 0, jobs.get("live_tuples") or 0
    if dead >= t.min_dead_tuples and dead > t.max_dead_ratio * (live + dead):
        problems.append(
            f"{JOB_TABLE} has {dead} dead tuples for {live} live ones (over "
            f"{t.max_dead_ratio:.0%}): autovacuum is not keeping up or is held back by a long "
            "transaction; tune autovacuum for the table or VACUUM it"
        )
    if t.max_table_mb is not None and jobs.get("total_bytes", 0) > t.max_table_mb * 2**20:
        problems.append(
            f"{JOB_TABLE} takes {jobs['total_bytes'] / 2**20:.1f} MB, over "
            f"{t.max_table_mb} MB: check PGJOBS['RETENTION'] and pruning"
        )
    held = [h for h in metrics.get("old_snapshots", []) if h["age_seconds"] > t.max_snapshot_age]
    problems += [_held_problem(h, t) for h in held]
    tx = metrics["oldest_transaction"]
    if (
        tx
        and tx["age_seconds"] > t.max_transaction_age
        and tx["pid"] not in {h["pid"] for h in held}
    ):
        problems.append(
            f"a transaction has been open for {tx['age_seconds']:.0f} s (pid {tx['pid']}, "
            f"{tx['state']}, application {tx['application_name']!r}): it stops vacuum from "
            "cleaning the jobs table; end it (pg_terminate_backend) or fix the caller"
        )
    leases = metrics["leases"]
    if leases["stale"]:
        problems.append(
            f"{leases['stale']} RUNNING jobs have a lease expired for more than "
            f"{leases['grace_seconds']:.0f} s: no worker is reaping (are the workers down?)"
        )
    backlog = metrics["backlog"]
    if (
        backlog["oldest_due_age_seconds"] is not None
        and backlog["oldest_due_age_seconds"] > t.max_due_age
    ):
        problems.append(
            f"the oldest due job has waited {backlog['oldest_due_age_seconds']:.0f} s (over "
            f"{t.max_due_age:.0f} s; {backlog['due']} due): add workers or concurrency"
        )
    if backlog["due"] and not metrics["live_workers"]:
        problems.append(
            f"{backlog['due']} jobs are due and no worker has sent a heartbeat "
            "recently: start `manage.py runjobs`"
        )
    problems += [
        _lag_problem(w, t)
        for w in metrics.get("event_loops", [])
        if w["loop_lag_seconds"] > t.max_loop_lag
    ]
    if metrics["unknown_types"] and not t.allow_unknown_types:
        listed = ", ".join(f"{u['type']} ({u['due']})" for u in metrics["unknown_types"])
        problems.append(
            f"due jobs of types no handler here knows: {listed}; deploy their "
            "handlers or cancel the jobs"
        )
    return problems


def _held_problem(h: dict[str, Any], t: Thresholds) -> str:
    return (
        f"pid {h['pid']} (application {h['application_name']!r}, user {h['user']!r}, "
        f"{h['state']}) has held back vacuum for {h['age_seconds']:.0f} s (over "
        f"{t.max_snapshot_age:.0f} s): dead job rows pile up and every claim walks them "
        f"until it ends; end it (pg_terminate_backend({h['pid']})) or fix the caller"
    )


def _lag_problem(w: dict[str, Any], t: Thresholds) -> str:
    return (
        f"the event loop of worker {w['worker_id']} lagged {w['loop_lag_seconds']:.2f} s "
        f"(over {t.max_loop_lag:g} s) since its previous heartbeat: an async handler runs "
        "blocking code without await (time.sleep, sync I/O), every async job of that worker "
        "waits; its log's worker.loop_blocked names the job (use asyncio or sync_to_async)"
    )


def summary(thresholds: Thresholds | None = None, using: str | None = None) -> dict[str, Any]:
    """The dashboard's part of the report: the verdict, the problems, who holds back vacuum."""
    rep = report(thresholds, using=using)
    return {
        "healthy": rep["healthy"],
        "problems": rep["problems"],
        "old_snapshots": (rep["metrics"] or {}).get("old_snapshots", []),
    }


def report(thresholds: Thresholds | None = None, using: str | None = None) -> dict[str, Any]:
    """The health report; a database that cannot be reached or is not migrated is unhealthy
    (``metrics`` None, the reason in ``problems``)."""
    t = thresholds or Thresholds()
    alias = using or conf.get("DATABASE")
    metrics: dict[str, Any] | None = None
    try:
        with db.tables_required(alias):
            metrics = collect(t, using=alias)
    except NotMigrated as exc:
        problems = [str(exc)]
    except (OperationalError, InterfaceError) as exc:
        problems = [
            f"cannot reach database {alias!r}: {exc.__class__.__name__}: "
            f"{' '.join(str(exc).split())[:500]}"
        ]
    else:
        problems = evaluate(metrics, t)
    return {
        "version": __version__,
        "healthy": not problems,
        "problems": problems,
        "metrics": metrics,
        "thresholds": {**asdict(t), "stale_lease_grace": t.grace()},
    }


# --- measurements ------------------------------------------------------------------------------


def _tables(cur: Any) -> dict[str, dict[str, Any]]:
    cur.execute(
        """SELECT n.name, pg_total_relation_size(c.oid), pg_relation_size(c.oid),
                  pg_indexes_size(c.oid), s.n_live_tup, s.n_dead_tup, s.last_autovacuum,
                  s.last_vacuum
           FROM unnest(%s::text[]) AS n(name)
           JOIN pg_class c ON c.oid = to_regclass(n.name)
           LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid""",
        [list(TABLES)],
    )
    return {
        r[0]: {
            "total_bytes": r[1],
            "table_bytes": r[2],
            "index_bytes": r[3],
            "live_tuples": r[4],
            "dead_tuples": r[5],
            "last_autovacuum": _iso(r[6]),
            "last_vacuum": _iso(r[7]),
        }
        for r in cur.fetchall()
    }


def _indexes(cur: Any) -> dict[str, dict[str, Any]]:
    cur.execute(
        """SELECT indexrelname, pg_relation_size(indexrelid), idx_scan
           FROM pg_stat_user_indexes WHERE relid = to_regclass(%s) ORDER BY indexrelname""",
        [JOB_TABLE],
    )
    return {r[0]: {"bytes": r[1], "scans": r[2]} for r in cur.fetchall()}


def _oldest_transaction(cur: Any) -> dict[str, Any] | None:
    cur.execute(
        """SELECT pid, extract(epoch FROM clock_timestamp() - xact_start)::float8, state,
                  application_name, left(query, 200)
           FROM pg_stat_activity
           WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()
             AND datname = current_database() AND backend_type = 'client backend'
           ORDER BY xact_start LIMIT 1"""
    )
    r = cur.fetchone()
    if r is None:
        return None
    return {
        "pid": r[0],
        "age_seconds": r[1],
        "state": r[2],
        "application_name": r[3],
        "query": r[4],
    }


def old_snapshots(cur: Any, min_age: float) -> list[dict[str, Any]]:
    """Backends of this database that hold back vacuum's horizon (an open snapshot or a
    transaction id) for longer than ``min_age`` seconds, oldest first."""
    cur.execute(
        """SELECT pid, extract(epoch FROM clock_timestamp() - xact_start)::float8, state,
                  application_name, usename, age(COALESCE(backend_xmin, backend_xid)),
                  left(query, 200)
           FROM pg_stat_activity
           WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
             AND xact_start < clock_timestamp() - %s * interval '1 second'
             AND pid <> pg_backend_pid() AND datname = current_database()
             AND backend_type = 'client backend'
           ORDER BY xact_start LIMIT 10""",
        [min_age],
    )
    return [
        {
            "pid": r[0],
            "age_seconds": r[1],
            "state": r[2],
            "application_name": r[3],
            "user": r[4],
            "xid_age": r[5],
            "query": r[6],
        }
        for r in cur.fetchall()
    ]


def _leases(cur: Any, grace: float) -> dict[str, Any]:
    cur.execute(
        f"""SELECT count(*),
                   count(*) FILTER (WHERE lease_expires_at < now() - %s * interval '1 second'),
                   extract(epoch FROM now() - min(lease_expires_at))::float8
            FROM {JOB_TABLE} WHERE status = {RUNNING_SQL} AND lease_expires_at < now()""",
        [grace],
    )
    expired, stale, oldest = cur.fetchone()
    return {
        "expired": expired,
        "stale": stale,
        "grace_seconds": grace,
        "oldest_expired_seconds": oldest,
    }


def _backlog(cur: Any) -> dict[str, Any]:
    """Due jobs that a worker could run now: known types, queues not paused."""
    cur.execute(
        f"""SELECT count(*), extract(epoch FROM now() - min(run_after))::float8
            FROM {JOB_TABLE}
            WHERE status = {PENDING_SQL} AND run_after <= now() AND type = ANY(%s::text[])
              AND queue <> ALL(ARRAY(SELECT name FROM {QUEUE_TABLE} WHERE paused))""",
        [registry.registered_types()],
    )
    due, age = cur.fetchone()
    return {"due": due, "oldest_due_age_seconds": age}


def unknown_due_types(known: Sequence[str], using: str | None = None) -> list[tuple[str, int]]:
    """Due PENDING jobs whose type no handler here knows (they are left pending, never run)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""SELECT type, count(*) FROM {JOB_TABLE}
                WHERE status = {PENDING_SQL} AND run_after <= now()
                  AND NOT (type = ANY(%s::text[]))
                GROUP BY type ORDER BY count(*) DESC LIMIT 20""",
            [list(known)],
        )
        return [(r[0], r[1]) for r in cur.fetchall()]


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
