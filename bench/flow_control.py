"""Flow control's performance targets (issue 28), side by side in one run.

    DATABASE_URL=postgres://... python bench/flow_control.py [--jobs 4000] [--workers 4] \
        [--threads 8] [--reps 3] [--backlog 100000] [--out bench/results/flow_control.md]

Every figure is a median over --reps; ratios compare runs of the same jobs on the same database
in the same run. Workers are processes (multiprocessing, each an in-process burst Worker on its
own connections); jobs are no-ops.

- rate:       a 500/s limit (burst 10), 4 workers: starts/s over the drain / 500, and the most
              starts in any 1 s window (must be <= 510)
- keys:       a non-binding rate over 1,000 keys: drain / the same drain without controls
- per_key:    per_key 1 over 1,000 keys: drain / without controls
- claim:      one claim of 8 jobs (in-process, one connection): p50 and p99 of the controlled
              claim (per_key 1, 1,000 keys) over the unlimited claim of an uncontrolled queue
- backlog:    --backlog throttled jobs on one key: other keys' controlled claim p50 / with none
- claim (generic plans): the claim figures with the worker's plan policy, generic plans once
              the statistics describe db.GENERIC_PLANS_MIN_ROWS rows (10,000 finished jobs
              beside the pending ones); the figures above are planned at every claim
- others:     an uncontrolled queue's drain while another queue is declared controlled / with
              nothing declared
- fair:       a lone tenant's drain in a queue shared 3:1 ("fair" weights) against the same
              drain without "fair" (a non-binding cap: the same controlled claim) and
              without controls; rounds alternated. `--only fair` runs these figures alone.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = os.environ.get("FLOW_DB", "pgjobs_bench_flow")
KEYS = 1000


def queues_setting() -> dict[str, Any]:
    return {
        "rated": {"rate": "500/s", "burst": 10},
        "keys": {"rate": "1000000/s", "burst": 1000, "key": "config.k"},
        "per_key": {"per_key": 1, "key": "config.k"},
        "fair": {"key": "config.k", "fair": {"default": 1, "acme": 3}},
        "unfair": {"key": "config.k", "concurrency": 100_000},
        "capped": {"concurrency": 100_000},
    }


def setup(queues: dict[str, Any], create: bool = False) -> None:
    import django
    import environ
    from django.conf import settings

    db = environ.Env().db_url("DATABASE_URL")
    db["NAME"] = DB_NAME
    settings.configure(
        DATABASES={"default": db},
        INSTALLED_APPS=["django_pgjobs"],
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        PGJOBS={"QUEUES": queues},
    )
    if create:
        import psycopg

        admin = environ.Env().db_url("DATABASE_URL")
        with psycopg.connect(
            host=admin["HOST"] or None,
            port=admin["PORT"] or None,
            user=admin["USER"] or None,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    django.setup()
    from django_pgjobs import handler, registry

    if registry.get("bench.noop") is None:
        handler("bench.noop")(lambda job: None)
    if create:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def _worker(queues: dict[str, Any], queue: str, threads: int) -> None:
    setup(queues)
    from django_pgjobs.worker import Worker, WorkerOptions

    options = WorkerOptions.from_settings(
        burst=True,
        listen=False,
        install_signal_handlers=False,
        concurrency=threads,
        queues=[queue],
        poll_interval=0.05,
    )
    Worker(options).run()


def sql(statement: str, params: Any = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchall() if cur.description else []


def drain(
    queue: str, jobs: int, workers: int, threads: int, declared: dict[str, Any], keys: int = KEYS
) -> float:
    """Seconds from the first start to the last finish of ``jobs`` no-ops over ``keys`` keys."""
    from django_pgjobs import enqueue_many

    sql("TRUNCATE pgjobs_job, pgjobs_rate, pgjobs_share")
    enqueue_many("bench.noop", [{"k": f"k{i % keys}"} for i in range(jobs)], queue=queue)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(declared, queue, threads)) for _ in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    left = sql("SELECT count(*) FROM pgjobs_job WHERE status <> 'COMPLETED'")[0][0]
    assert left == 0, f"{left} jobs not drained in {queue}"
    return float(
        sql("SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM pgjobs_job")[0][0]
    )


FAIR_VARIANTS = ("fair", "unfair", "capped", "plain")


def fair_figures(rep: int, jobs: int, workers: int, threads: int, declared: dict[str, Any]):
    """Drain seconds of one tenant's ``jobs`` per FAIR_VARIANTS queue (with "fair"; the same
    key path without it; a cap and no key path; no controls), the order rotated per rep so
    that no variant always runs first on a loaded machine."""
    k = rep % len(FAIR_VARIANTS)
    order = FAIR_VARIANTS[k:] + FAIR_VARIANTS[:k]
    return {q: drain(q, jobs, workers, threads, declared, keys=1) for q in order}


def rate_figures(jobs: int) -> tuple[float, int]:
    """(starts per second over the drain, most starts in a 1 s window) of the last drain."""
    starts = [r[0] for r in sql("SELECT started_at FROM pgjobs_job ORDER BY started_at")]
    span = (starts[-1] - starts[0]).total_seconds()
    most, j = 0, 0
    for i in range(len(starts)):
        while (starts[i] - starts[j]).total_seconds() > 1.0:
            j += 1
        most = max(most, i - j + 1)
    return (jobs - 10) / span, most


def claim_times(queue: str, controlled: bool, n: int = 300) -> list[float]:
    """Seconds per claim of 8 jobs, finishing them between claims (no timing of the finish)."""
    from django_pgjobs import flow, queries

    times = []
    for _ in range(n):
        t = time.perf_counter()
        if controlled:
            rows = queries.claim_controlled(
                queue=queue,
                controls=flow.queues()[queue],
                worker_id="b",
                types=["bench.noop"],
                limit=8,
                lease_seconds=30,
            ).rows
        else:
            rows = queries.claim(
                worker_id="b", types=["bench.noop"], queues=[queue], limit=8, lease_seconds=30
            )
        times.append(time.perf_counter() - t)
        sql(
            "UPDATE pgjobs_job SET status = 'COMPLETED', lease_token = NULL, "
            "lease_expires_at = NULL, finished_at = now() WHERE id = ANY(%s)",
            [[r.id for r in rows]],
        )
    return times


def generic_claim_times() -> tuple[list[float], list[float]]:
    """claim_times() of the controlled and the unlimited claim with the worker's generic plans
    (db.use_generic_plans); the connection is closed after, so later claims plan afresh."""
    from django.db import connection

    from django_pgjobs import db, enqueue_many

    sql("TRUNCATE pgjobs_job, pgjobs_rate")
    enqueue_many("bench.noop", [{"k": f"k{i % KEYS}"} for i in range(4000)], queue="per_key")
    enqueue_many("bench.noop", [{}] * 8000, queue="plain")
    sql(
        "INSERT INTO pgjobs_job (type, queue, status, finished_at) "
        "SELECT 'bench.noop', 'done', 'COMPLETED', now() FROM generate_series(1, %s)",
        [db.GENERIC_PLANS_MIN_ROWS],
    )
    sql("ANALYZE pgjobs_job")
    db.use_generic_plans()
    assert db.generic_plans_on(None), "generic plans were not turned on"
    try:
        return claim_times("per_key", True), claim_times("plain", False)
    finally:
        connection.close()


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backlog", type=int, default=100_000)
    ap.add_argument("--out", default=str(ROOT / "bench/results/flow_control.md"))
    ap.add_argument("--label", default="")
    ap.add_argument("--only", choices=["all", "fair"], default="all")
    a = ap.parse_args()
    declared = queues_setting()
    setup(declared, create=True)
    from django_pgjobs import enqueue_many

    load_before = _load()
    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    w, t = a.workers, a.threads
    for rep in range(a.reps):
        lone = fair_figures(rep, a.jobs, w, t, declared)
        add(
            "fair: lone tenant's drain, same queue without fair / fair",
            lone["unfair"] / lone["fair"],
        )
        add("fair: lone tenant's drain, a cap, no key path / fair", lone["capped"] / lone["fair"])
        add("fair: lone tenant's drain, no controls / fair", lone["plain"] / lone["fair"])
        if a.only == "fair":
            continue
        rated_jobs = min(a.jobs, 2000)
        drain("rated", rated_jobs, w, t, declared)
        per_s, most = rate_figures(rated_jobs)
        add("rate: starts/s / 500", per_s / 500)
        add("rate: most starts in 1 s (limit 510)", most)
        plain = drain("plain", a.jobs, w, t, {})
        add(
            "keys: drain plain / non-binding rate over 1,000 keys",
            plain / drain("keys", a.jobs, w, t, declared),
        )
        add(
            "per_key: drain plain / per_key 1 over 1,000 keys",
            plain / drain("per_key", a.jobs, w, t, declared),
        )
        add(
            "others: drain with nothing declared / with a controlled queue declared",
            plain / drain("plain", a.jobs, w, t, declared),
        )
        sql("TRUNCATE pgjobs_job, pgjobs_rate")
        enqueue_many("bench.noop", [{"k": f"k{i % KEYS}"} for i in range(4000)], queue="per_key")
        enqueue_many("bench.noop", [{}] * 4000, queue="plain")
        sql("ANALYZE pgjobs_job")
        c, u = claim_times("per_key", True), claim_times("plain", False)
        add("claim p50: controlled / unlimited", pct(c, 0.5) / pct(u, 0.5))
        add("claim p99: controlled / unlimited", pct(c, 0.99) / pct(u, 0.99))
        base = pct(claim_times("per_key", True), 0.5)
        sql(
            "INSERT INTO pgjobs_job (type, queue, flow_key) SELECT 'bench.noop', 'per_key', "
            "'held' FROM generate_series(1, %s)",
            [a.backlog],
        )
        sql(
            "UPDATE pgjobs_job SET status = 'RUNNING', lease_token = gen_random_uuid(), "
            "lease_expires_at = now() + interval '1 hour' WHERE id = (SELECT min(id) FROM "
            "pgjobs_job WHERE flow_key = 'held')"
        )
        sql("ANALYZE pgjobs_job")
        add(
            "backlog: other keys' claim p50 with / without the held backlog",
            pct(claim_times("per_key", True), 0.5) / base,
        )
        c, u = generic_claim_times()
        add("claim p50, generic plans: controlled / unlimited", pct(c, 0.5) / pct(u, 0.5))
        add("claim p99, generic plans: controlled / unlimited", pct(c, 0.99) / pct(u, 0.99))
    lines = [
        "# Flow control (bench/flow_control.py)",
        "",
        f"{a.label or 'machine not labelled'}; {a.jobs} jobs, {w} workers x {t} threads, "
        f"{a.reps} reps, medians. Command: `python bench/flow_control.py --jobs {a.jobs} "
        f"--workers {w} --threads {t} --reps {a.reps} --backlog {a.backlog} --only {a.only}`"
        f"; load average before/after: {load_before} / {_load()}",
        "",
        "| figure | median | reps |",
        "|---|---|---|",
    ]
    for name, values in results.items():
        reps = ", ".join(f"{v:.3g}" for v in values)
        lines.append(f"| {name} | {statistics.median(values):.3g} | {reps} |")
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
