#!/usr/bin/env python3
"""django-pgjobs over 10 million finished jobs, side by side with the same work on a table
without them:

    python3 bench/scale.py --pg-url postgresql://postgres@127.0.0.1:PORT/ [--rows 10000000]
        [--phases drains,heartbeat,pages,prune] [--reps 3] [--drain-n 20000] [--reuse]

Two databases, ``bench_scale_big`` (ROWS finished jobs of two weeks, in the shape a real
history has: four types, mostly COMPLETED, some FAILED with an error, some CANCELLED, half
with a trace id and a tenant) and ``bench_scale_empty`` (none), both with the same recent
history: one untimed drain, then the timed ones, VACUUM before each. Phases:

    drains     drain_w1 and drain_w2 (claim + finalize), the two tables taking turns
    cycles     claim, heartbeat and finalize of 100 jobs at a time, timed apart, the two
               tables in turn batch by batch in one process (the drift falls on both alike)
    heartbeat  lease renewals of 20,000 running jobs, 100 per statement, the two tables in turns
    pages      the admin's changelist (plain, filtered, searched), a job's page, the dashboard
               on the big table (Django's test client)
    prune      retention deleting the big table's backlog while a worker runs a steady load:
               claim latency (started_at - created_at) p50/p99 with and without the pruner,
               and leases that expired (none may)

Results: bench/results/scale.json and scale.md. ``--reuse`` keeps the big database of the last
run (filling 10M rows takes minutes); ``--keep`` leaves both databases in place at the end.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import envs  # noqa: E402

envs.run_in_core(__file__)  # re-run inside bench/.venvs/core, like run.py

import argparse  # noqa: E402

import harness  # noqa: E402
import psycopg  # noqa: E402
from benchlib import cli, procs  # noqa: E402
from harness import log  # noqa: E402
from systems import DRIVERS, PgJobs  # noqa: E402

BIG, EMPTY = "bench_scale_big", "bench_scale_empty"
RESULTS = BENCH / "results"

# Two weeks of finished jobs, oldest first (ids grow with created_at, as they would).
FILL_SQL = """
INSERT INTO pgjobs_job (type, queue, priority, status, config, result, error, trace_id,
    tenant_id, attempts, max_attempts, run_after, started_at, finished_at, duration_ms,
    created_at, updated_at, history, cancel_requested)
SELECT (ARRAY['email.send', 'report.build', 'noop', 'sync.account'])[1 + g %% 4],
       'default', 0,
       CASE WHEN g %% 50 = 0 THEN 'FAILED' WHEN g %% 97 = 0 THEN 'CANCELLED'
            ELSE 'COMPLETED' END,
       jsonb_build_object('i', g, 'user', g %% 5000), '{}'::jsonb,
       CASE WHEN g %% 50 = 0 THEN 'ValueError: upstream said no' END,
       CASE WHEN g %% 2 = 0 THEN 'trace-' || g END,
       CASE WHEN g %% 2 = 1 THEN 'tenant-' || (g %% 100) END,
       CASE WHEN g %% 20 = 0 THEN 2 ELSE 1 END, 5,
       t, t + interval '5 ms', t + interval '5 ms' + (20 + g %% 200) * interval '1 ms',
       20 + g %% 200, t, t + interval '5 ms' + (20 + g %% 200) * interval '1 ms',
       CASE WHEN g %% 20 = 0 THEN jsonb_build_array(jsonb_build_object(
           'attempt', 1, 'outcome', 'retry', 'error', 'TimeoutError')) ELSE '[]'::jsonb END,
       false
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g,
     LATERAL (SELECT now() - interval '14 days'
                     + (g::float8 / %(rows)s) * interval '14 days' AS t) x
"""


def parse(argv: list[str]) -> argparse.Namespace:
    ap = cli.parser(__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--phases", default="drains,cycles,pages,prune")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--drain-n", type=int, default=20_000)
    ap.add_argument("--prune-seconds", type=float, default=60.0)
    ap.add_argument(
        "--prune-rate",
        type=float,
        default=200.0,
        help="jobs/s of the steady load (one job per enqueue)",
    )
    ap.add_argument(
        "--prune-interval",
        type=float,
        default=5.0,
        help="PGJOBS['PRUNE_INTERVAL'] of the pruning worker (default 5 s)",
    )
    ap.add_argument("--reuse", action="store_true", help="keep the big database of the last run")
    ap.add_argument("--keep", action="store_true", help="leave both databases at the end")
    ap.add_argument("--out", default=str(RESULTS))
    return ap.parse_args(argv)


def make_ctx(a: argparse.Namespace) -> tuple[harness.Ctx, PgJobs]:
    hargs = harness.parse_args(
        ["--full", "--only", "pgjobs", "--pg-url", a.pg_url, "--retries", "0"]
    )
    ctx = harness.Ctx(hargs)
    ctx.metrics = set()
    system = PgJobs(ctx)
    system.build()
    return ctx, system


def run_driver(
    ctx, system: PgJobs, *args, settings: str = "bench_settings", timeout: float = 600
) -> dict:
    env = dict(system.env(), DJANGO_SETTINGS_MODULE=settings)
    argv = [system.python, str(DRIVERS / "pgjobs_scale.py"), *map(str, args)]
    return procs.run_json(argv, env=env, cwd=None, timeout=timeout, log_path=ctx.tmp / "scale.log")


def exists(ctx, db: str) -> bool:
    with harness.admin(ctx) as c:
        return bool(c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone())


def fill(system: PgJobs, rows: int, chunk: int = 1_000_000) -> float:
    t0 = time.monotonic()
    with psycopg.connect(system.url, autocommit=True) as c:
        for lo in range(1, rows + 1, chunk):
            hi = min(rows, lo + chunk - 1)
            c.execute(FILL_SQL, {"lo": lo, "hi": hi, "rows": rows})
            log(f"  filled {hi:,} rows ({time.monotonic() - t0:.0f}s)")
        c.execute("VACUUM (ANALYZE) pgjobs_job")  # what autovacuum would have done by now
        c.execute("CHECKPOINT")
    return time.monotonic() - t0


def setup(ctx, system: PgJobs, a: argparse.Namespace) -> dict:
    """Both databases: schema, (big) the finished rows, then the same one untimed drain."""
    info = {}
    for db in (EMPTY, BIG):
        with harness.on_database(system, db):
            if db == BIG and a.reuse and exists(ctx, BIG):
                harness.sql(
                    system,
                    "DELETE FROM pgjobs_job WHERE finished_at IS NULL "
                    "OR finished_at > now() - interval '1 hour'",
                )
                harness.vacuum(system, analyze=True)
                info["reused"] = True
                continue
            harness.setup_schema(ctx, system)
            env = dict(system.env(), DJANGO_SETTINGS_MODULE="admin_settings")
            subprocess.run(
                [system.python, str(system.project / "manage.py"), "migrate", "-v0"],
                env=env,
                check=True,
                timeout=300,
            )
            if db == BIG:
                log(f"filling {a.rows:,} finished jobs")
                info["fill_s"] = fill(system, a.rows)
            harness.drain(ctx, system, a.drain_n, 1, keep_rows=True)  # untimed history
            harness.vacuum(system, analyze=True)
    with harness.on_database(system, BIG):
        info["big_rows"] = harness.sql(
            system,
            "SELECT reltuples::bigint FROM pg_class WHERE relname = 'pgjobs_job'",
            fetch=True,
        )[0][0]
        info["big_sizes"] = table_sizes(system)
    return info


def table_sizes(system: PgJobs) -> dict:
    rows = harness.sql(
        system,
        """SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
        WHERE c.relname LIKE 'pgjobs_job%' ORDER BY 2 DESC""",
        fetch=True,
    )
    return {name: size for name, size in rows}


def turns(reps: int, step) -> dict[str, list]:
    """step(db) for both tables, reps times, the order alternating (B E, E B, ...)."""
    out: dict[str, list] = {BIG: [], EMPTY: []}
    for rep in range(reps):
        order = (BIG, EMPTY) if rep % 2 == 0 else (EMPTY, BIG)
        for db in order:
            out[db].append(step(db))
    return out


def ratios(got: dict[str, list], key: str = "rate") -> dict:
    big = [s[key] for s in got[BIG]]
    empty = [s[key] for s in got[EMPTY]]
    return {
        "big": big,
        "empty": empty,
        "big_median": statistics.median(big),
        "empty_median": statistics.median(empty),
        "ratio_of_medians": statistics.median(big) / statistics.median(empty),
        "pair_ratios": [b / e for b, e in zip(big, empty, strict=True)],
        "median_pair_ratio": statistics.median(b / e for b, e in zip(big, empty, strict=True)),
    }


def phase_drains(ctx, system: PgJobs, a) -> dict:
    res = {}
    for workers in (1, 2):

        def one(db: str, w: int = workers) -> dict:
            with harness.on_database(system, db):
                s = harness.measured(
                    ctx,
                    f"drain_w{w} {db}",
                    lambda: harness.drain(ctx, system, a.drain_n, w, keep_rows=True),
                    retry=False,
                )
            log(
                f"  drain_w{w} {db}: {s['rate']:,.0f} jobs/s "
                f"(other work: {s['foreign_cpu_cores']:.2f} cores)"
            )
            return s

        res[f"drain_w{workers}"] = ratios(turns(a.reps, one))
    return res


def phase_heartbeat(ctx, system: PgJobs, a) -> dict:
    def one(db: str) -> dict:
        with harness.on_database(system, db):
            harness.client(ctx, system, "prefill", 20_000)
            harness.vacuum(system)
            s = harness.measured(
                ctx,
                f"heartbeat {db}",
                lambda: run_driver(ctx, system, "heartbeat", 20_000, 100),
                retry=False,
            )
            harness.sql(system, "DELETE FROM pgjobs_job WHERE status = 'PENDING'")
        log(f"  heartbeat {db}: {s['rate']:,.0f} rows/s ({s['ms_p50']:.2f} ms per statement)")
        return s

    return {"heartbeat_rows": ratios(turns(a.reps, one))}


PENDING_SQL = (
    "INSERT INTO pgjobs_job (type, queue, config, run_after) SELECT 'noop', "
    "'default', jsonb_build_object('i', g), now() - interval '1 s' "
    "FROM generate_series(1, %s) g"
)


def phase_cycles(ctx, system: PgJobs, a) -> dict:
    """claim / heartbeat / finalize of 100 jobs at a time, the two tables in turn batch by
    batch in one process (drivers/pgjobs_scale.py cycles): the drift of a shared machine
    falls on both alike, which whole drains measured apart cannot promise."""
    samples = []
    for rep in range(a.reps):
        for db in (BIG, EMPTY):
            with harness.on_database(system, db):
                harness.checkpoint(system)
                harness.sql(system, PENDING_SQL % int(a.drain_n))
                harness.vacuum(system)
        swap = rep % 2 == 1  # every other rep the big table is on the driver's "other" alias
        with harness.on_database(system, BIG):
            env_db = {"BENCH_OTHER_DB": EMPTY, "BENCH_SWAP": "1" if swap else "0"}
            s = harness.measured(
                ctx,
                "cycles",
                lambda env_db=env_db: procs.run_json(
                    [
                        system.python,
                        str(DRIVERS / "pgjobs_scale.py"),
                        "cycles",
                        str(a.drain_n),
                        "100",
                    ],
                    env=dict(system.env(), **env_db),
                    timeout=600,
                    log_path=ctx.tmp / "scale.log",
                ),
                retry=False,
            )
        if swap:
            s["default"], s["other"] = s["other"], s["default"]
        s["swapped"] = swap
        samples.append(s)
        log(
            f"  cycles: claim {s['default']['claim_rate']:,.0f} vs {s['other']['claim_rate']:,.0f}"
            f", finalize {s['default']['finalize_rate']:,.0f} vs {s['other']['finalize_rate']:,.0f}"
            f", heartbeat {s['default']['heartbeat_rate']:,.0f} vs "
            f"{s['other']['heartbeat_rate']:,.0f} rows/s (big vs empty)"
        )
    out = {}
    for step in ("claim", "heartbeat", "finalize", "cycle"):
        got = {
            BIG: [{"rate": s["default"][f"{step}_rate"]} for s in samples],
            EMPTY: [{"rate": s["other"][f"{step}_rate"]} for s in samples],
        }
        out[f"{step}_rows"] = ratios(got)
    out["samples"] = samples
    return out


def phase_pages(ctx, system: PgJobs, a) -> dict:
    with harness.on_database(system, BIG):
        res = run_driver(ctx, system, "pages", 5, settings="admin_settings")
    for name, r in res.items():
        log(f"  page {name}: median {r['ms_median']:.0f} ms (status {r['status']})")
    return {"pages": res}


# What a pruning run leaves to measure: claim latency of the jobs it ran, leases that expired.
RUN_STATS = """
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY started_at - created_at),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY started_at - created_at),
       max(started_at - created_at),
       count(*) FILTER (WHERE attempts > 1 OR history::text LIKE '%%lease_expired%%')
FROM pgjobs_job WHERE created_at >= %s AND type = 'noop'
"""


def deleted(c: psycopg.Connection) -> int:
    c.execute("SELECT pg_stat_clear_snapshot()")
    return c.execute(
        "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'pgjobs_job'"
    ).fetchone()[0]


def prune_run(ctx, system: PgJobs, a, prune: bool) -> dict:
    """One worker (pruning or not) under a steady single-job load for prune_seconds."""
    with psycopg.connect(system.url, autocommit=True) as c:
        t0 = c.execute("SELECT now()").fetchone()[0]
        before = c.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE relname = 'pgjobs_job'"
        ).fetchone()[0]
        old = c.execute(
            "SELECT count(*) FROM pgjobs_job WHERE finished_at < now() - "
            "interval '7 days' AND status IN ('COMPLETED', 'CANCELLED')"
        ).fetchone()[0]
        deleted0 = deleted(c)
    env = dict(system.env(), BENCH_PRUNE_INTERVAL=str(a.prune_interval))
    argv, cwd = system.worker_argv(burst=False)
    worker = procs.Proc(
        argv + ([] if prune else ["--no-prune"]),
        env=env,
        cwd=cwd,
        log_path=ctx.tmp / "scale-prune-worker.log",
        name="prune-worker",
    )
    try:
        time.sleep(3)  # start-up
        load = run_driver(
            ctx,
            system,
            "steady",
            a.prune_rate,
            a.prune_seconds,
            1 / a.prune_rate,
            timeout=a.prune_seconds + 120,
        )
        time.sleep(2)
    finally:
        worker.stop()
    with psycopg.connect(system.url, autocommit=True) as c:
        n, p50, p99, worst, lost = c.execute(RUN_STATS, [t0]).fetchone()
        pruned = deleted(c) - deleted0
        c.execute("DELETE FROM pgjobs_job WHERE created_at >= %s AND type = 'noop'", [t0])
        c.execute("VACUUM pgjobs_job")
    out = {
        "prune": prune,
        "jobs": n,
        "claim_ms_p50": p50.total_seconds() * 1000,
        "claim_ms_p99": p99.total_seconds() * 1000,
        "claim_ms_max": worst.total_seconds() * 1000,
        "lost_leases": lost,
        "pruned": pruned,
        "prunable_before": old,
        "table_rows_before": before,
        "producer_behind_s": load["behind_s"],
    }
    log(
        f"  {'pruning' if prune else 'no pruning'}: claim p50 {out['claim_ms_p50']:.1f} ms, "
        f"p99 {out['claim_ms_p99']:.1f} ms, {lost} leases lost, {out['pruned']:,} pruned"
    )
    return out


def phase_prune(ctx, system: PgJobs, a) -> dict:
    runs = []
    with harness.on_database(system, BIG):
        for rep in range(a.reps):
            order = (False, True) if rep % 2 == 0 else (True, False)
            runs += [prune_run(ctx, system, a, prune) for prune in order]
    on = [r for r in runs if r["prune"]]
    off = [r for r in runs if not r["prune"]]
    p99_on = statistics.median(r["claim_ms_p99"] for r in on)
    p99_off = statistics.median(r["claim_ms_p99"] for r in off)
    return {
        "runs": runs,
        "p99_ratio": p99_on / p99_off,
        "p99_on": p99_on,
        "p99_off": p99_off,
        "lost_leases": sum(r["lost_leases"] for r in runs),
        "pruned_per_s": statistics.median(r["pruned"] / a.prune_seconds for r in on),
        "interval_s": a.prune_interval,
        "rate": a.prune_rate,
        "seconds": a.prune_seconds,
    }


def main(argv: list[str]) -> int:
    a = parse(argv)
    ctx, system = make_ctx(a)
    phases = a.phases.split(",")
    results: dict = {
        "command": "python3 bench/scale.py " + " ".join(argv),
        "rows": a.rows,
        "drain_n": a.drain_n,
        "reps": a.reps,
        "machine": harness.machine_info(ctx),
    }
    try:
        results["setup"] = setup(ctx, system, a)
        for name in phases:
            log(f"phase {name}")
            results[name] = globals()[f"phase_{name}"](ctx, system, a)
            write(results, Path(a.out))
    finally:
        procs.kill_all()
        if not a.keep:
            harness.drop_db(ctx, EMPTY)
    write(results, Path(a.out))
    print((Path(a.out) / "scale.md").read_text())
    return 0


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "scale.md").write_text(render(results))


def render(r: dict) -> str:
    lines = [
        f"# django-pgjobs over {r['rows']:,} finished jobs",
        "",
        f"`{r['command']}` — {r['machine']['date']}, PostgreSQL "
        f"{r['machine']['postgres']['version']}, shared_buffers "
        f"{r['machine']['postgres']['shared_buffers']}",
        "",
    ]
    rows = [
        (k, v)
        for ph in ("drains", "cycles", "heartbeat")
        for k, v in (r.get(ph) or {}).items()
        if k != "samples"
    ]
    if rows:
        lines += [
            "| metric | with the rows (median) | without | ratio of medians | "
            "per-pair ratios | target ≥ 0.9× |",
            "|---|---|---|---|---|---|",
        ]
        for k, v in rows:
            ok = "PASS" if v["ratio_of_medians"] >= 0.9 else "FAIL"
            lines.append(
                f"| {k} | {v['big_median']:,.0f}/s | {v['empty_median']:,.0f}/s | "
                f"{v['ratio_of_medians']:.2f}× | "
                f"{', '.join(f'{x:.2f}' for x in v['pair_ratios'])} | {ok} |"
            )
        lines.append("")
    if r.get("pages"):
        lines += [
            "| admin page | median ms (5 requests) | all | target ≤ 300 ms |",
            "|---|---|---|---|",
        ]
        for name, p in r["pages"]["pages"].items():
            ok = "PASS" if p["ms_median"] <= 300 and p["status"] == 200 else "FAIL"
            lines.append(
                f"| {name} `{p['url']}` | {p['ms_median']:.0f} | "
                f"{', '.join(f'{x:.0f}' for x in p['ms'])} | {ok} |"
            )
        lines.append("")
    if r.get("prune"):
        lines += prune_lines(r["prune"])
    return "\n".join(lines) + "\n"


def prune_lines(p: dict) -> list[str]:
    ok = "PASS" if p["p99_ratio"] <= 1.2 and p["lost_leases"] == 0 else "FAIL"
    lines = [
        f"Retention pruning the backlog (PRUNE_INTERVAL {p['interval_s']:g} s) under "
        f"{p['rate']:.0f} single enqueues/s, {p['seconds']:g} s per run, runs in turns:",
        "",
        "| run | claim p50 ms | p99 ms | max ms | leases lost | pruned |",
        "|---|---|---|---|---|---|",
    ]
    for r in p["runs"]:
        lines.append(
            f"| {'pruning' if r['prune'] else 'no pruning'} | {r['claim_ms_p50']:.1f} | "
            f"{r['claim_ms_p99']:.1f} | {r['claim_ms_max']:.1f} | {r['lost_leases']} | "
            f"{r['pruned']:,} |"
        )
    lines += [
        "",
        f"p99 with pruning / without: {p['p99_ratio']:.2f}× (target ≤ 1.2×), "
        f"leases lost: {p['lost_leases']} (target 0), pruned "
        f"{p['pruned_per_s']:,.0f} rows/s: {ok}",
        "",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
