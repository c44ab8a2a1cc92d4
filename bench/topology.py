"""Behind PgBouncer: pickup latency with and without the direct listener, and the connections
one `runjobs` uses by role.

    .venv/bin/python bench/topology.py [--samples 40] [--reps 3] [--concurrency 1,10,50]

Uses DATABASE_URL (a superuser: it creates and drops the database pgjobs_bench_topology), or
starts a throwaway PostgreSQL (scripts/pgserver.py); starts its own PgBouncer
(scripts/pgbouncer.py: transaction mode, pool of 3). Writes bench/results/topology.md and
topology.json.

Pickup: one idle worker (2 threads, POLL_INTERVAL 1 s); a job is inserted and NOTIFY'd in one
transaction at random gaps (0.05-2.05 s), through the same kind of connection as the worker's
queue database; its pickup is the claim's time minus the insert's, both on the database clock.
Connections: a direct worker with --concurrency C runs 3*C jobs that each use the database for
50 ms; pg_stat_activity, sampled, by the role in application_name (pgjobs:<worker>:<role>).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "bench" / "topology_project"
RESULTS = ROOT / "bench" / "results"
DB = "pgjobs_bench_topology"
sys.path.insert(0, str(ROOT / "scripts"))

from pgbouncer import PgBouncer, find_pgbouncer  # noqa: E402
from pgserver import EmbeddedPostgres  # noqa: E402


@contextlib.contextmanager
def server() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        yield url
        return
    with EmbeddedPostgres(max_connections=300) as pg:
        yield pg.url


def with_db(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


class Worker:
    def __init__(
        self,
        queue_url: str,
        direct_url: str,
        *args: str,
        pooled: bool = False,
        pgjobs: dict | None = None,
    ):
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}:{PROJECT}",
            "BENCH_QUEUE_URL": queue_url,
            "BENCH_DIRECT_URL": direct_url,
            "BENCH_POOLED": "1" if pooled else "",
            "BENCH_PGJOBS": json.dumps(pgjobs or {}),
        }
        self.log = open(RESULTS / "tmp" / "topology-worker.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "django",
                "runjobs",
                "--settings",
                "topology_settings",
                "--queues",
                "default",
                *args,
            ],
            cwd=PROJECT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def manage(direct_url: str, *args: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{PROJECT}",
        "BENCH_QUEUE_URL": direct_url,
        "BENCH_DIRECT_URL": direct_url,
    }
    subprocess.run(
        [sys.executable, "-m", "django", *args, "--settings", "topology_settings"],  # noqa: S603
        cwd=PROJECT,
        env=env,
        check=True,
        capture_output=True,
    )


def insert(conn: psycopg.Connection, job_type: str, n: int = 1, config: str = "{}") -> list[int]:
    with conn.transaction():
        ids = [
            r[0]
            for r in conn.execute(
                "INSERT INTO pgjobs_job (type, config) SELECT %s, %s::jsonb FROM generate_series(1, %s)"
                " RETURNING id",
                [job_type, config, n],
            )
        ]
        conn.execute("SELECT pg_notify('pgjobs', 'default')")
    return ids


def wait_done(conn: psycopg.Connection, ids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while conn.execute(
        "SELECT count(*) FROM pgjobs_job WHERE id = ANY(%s) AND status <> 'COMPLETED'", [ids]
    ).fetchone()[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs {ids[:5]}… not completed within {timeout}s")
        time.sleep(0.003)


def pickup_run(enqueue_url: str, samples: int) -> dict:
    # prepare_threshold None: psycopg would prepare (and PgBouncer 1.18 lose) repeated queries
    with psycopg.connect(enqueue_url, autocommit=True, prepare_threshold=None) as conn:
        wait_done(conn, insert(conn, "bench.noop", 3), timeout=60)  # the worker is up
        time.sleep(1.5)
        waits = []
        for _ in range(samples):
            # Gaps spread over two poll intervals: a polling worker is met at any phase.
            time.sleep(random.uniform(0.05, 2.05))  # noqa: S311
            (job_id,) = insert(conn, "bench.noop")
            wait_done(conn, [job_id])
            waits.append(
                conn.execute(
                    "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM pgjobs_job "
                    "WHERE id = %s",
                    [job_id],
                ).fetchone()[0]
            )
    waits = sorted(float(w) for w in waits)
    return {
        "p50": statistics.median(waits),
        "p95": waits[int(0.95 * (len(waits) - 1))],
        "samples": waits,
    }


def pickup(direct: str, bouncer: PgBouncer, samples: int, reps: int) -> dict:
    pooled = bouncer.url_for(DB)
    configs = {
        "direct, LISTEN": (direct, direct, False, {}),
        "PgBouncer, no listener (polls every 1 s)": (pooled, pooled, True, {}),
        "PgBouncer + direct listener (LISTEN_DATABASE)": (
            pooled,
            pooled,
            True,
            {"LISTEN_DATABASE": "direct"},
        ),
    }
    out: dict = {}
    for rep in range(reps):
        for name, (queue, enqueue_url, is_pooled, pgjobs) in configs.items():
            w = Worker(queue, direct, "--concurrency", "2", pooled=is_pooled, pgjobs=pgjobs)
            try:
                out.setdefault(name, []).append(pickup_run(enqueue_url, samples))
            finally:
                w.stop()
            print(f"rep {rep + 1} {name}: p50 {out[name][-1]['p50']:.1f} ms", file=sys.stderr)
    return out


def budget_run(direct: str, conn: psycopg.Connection, concurrency: int) -> dict:
    w = Worker(direct, direct, "--concurrency", str(concurrency), "--prefetch", "0")
    most: dict[str, int] = {}
    try:
        ids = insert(conn, "bench.touch", 3 * concurrency, '{"seconds": 0.05}')
        deadline = time.monotonic() + 120
        while (
            conn.execute(
                "SELECT count(*) FROM pgjobs_job WHERE id = ANY(%s) AND status <> 'COMPLETED'",
                [ids],
            ).fetchone()[0]
            and time.monotonic() < deadline
        ):
            rows = conn.execute(
                "SELECT split_part(application_name, ':', 5), count(*) FROM pg_stat_activity "
                "WHERE application_name LIKE %s GROUP BY 1",
                [f"pgjobs:%:{w.proc.pid}:%"],
            )
            for role, n in rows:
                most[role] = max(most.get(role, 0), n)
            time.sleep(0.02)
    finally:
        w.stop()
    return most


def budget(direct: str, levels: list[int]) -> dict:
    with psycopg.connect(direct, autocommit=True) as conn:
        return {c: budget_run(direct, conn, c) for c in levels}


def report(result: dict) -> str:
    lines = [
        "# Behind PgBouncer: pickup latency and connections per worker",
        "",
        f"`{result['command']}` — {result['date']}, {result['cores']} cores, "
        f"{result['server']}, PgBouncer {result['pgbouncer']} (transaction mode, pool of 3)."
        "",
        "",
        f"## Pickup latency ({result['samples']} jobs per run, {result['reps']} runs; "
        "median over runs of each run's p50 / p95, ms)",
        "",
        "| worker's connections | p50 | p95 | runs' p50 |",
        "|---|---|---|---|",
    ]
    for name, runs in result["pickup"].items():
        p50 = statistics.median(r["p50"] for r in runs)
        p95 = statistics.median(r["p95"] for r in runs)
        each = ", ".join(f"{r['p50']:.1f}" for r in runs)
        lines.append(f"| {name} | {p50:.1f} | {p95:.1f} | {each} |")
    lines += [
        "",
        "## Connections of one direct `runjobs` by role (most seen at once)",
        "",
        "Each of 3 x C jobs uses the database for 50 ms from its handler thread.",
        "",
        "| --concurrency | main (claim loop) | services | listen | exec (handler threads)"
        " | total |",
        "|---|---|---|---|---|---|",
    ]
    for c, roles in result["budget"].items():
        cells = [roles.get(r, 0) for r in ("main", "services", "listen", "exec")]
        lines.append(f"| {c} | " + " | ".join(map(str, cells)) + f" | {sum(cells)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", default="1,10,50")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    (RESULTS / "tmp").mkdir(parents=True, exist_ok=True)  # the worker's log (gitignored)
    with server() as url:
        admin = with_db(url, "postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB}"')
            conn.execute(f'CREATE DATABASE "{DB}"')
            version = conn.execute("SHOW server_version").fetchone()[0]
        direct = with_db(url, DB)
        try:
            manage(direct, "migrate", "-v", "0")
            with PgBouncer(url, pool_size=3) as bouncer:
                lat = pickup(direct, bouncer, args.samples, args.reps)
            used = budget(direct, levels)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    pgb = subprocess.run(
        [find_pgbouncer() or "pgbouncer", "--version"],  # noqa: S603
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()[1]
    result = {
        "command": "python bench/topology.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "server": f"PostgreSQL {version}",
        "pgbouncer": pgb,
        "samples": args.samples,
        "reps": args.reps,
        "pickup": lat,
        "budget": used,
    }
    (RESULTS / "topology.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "topology.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
