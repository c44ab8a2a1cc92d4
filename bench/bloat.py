#!/usr/bin/env python3
"""Bloat soak: a steady load while a transaction holds its snapshot in the middle.

    python3 bench/bloat.py --pg-url postgresql://postgres@127.0.0.1:PORT/      # 20 min, 8 held
    python3 bench/bloat.py --pg-url ... --minutes 3 --hold-minutes 1             # short version

One django-pgjobs worker (``runjobs``, its normal listening mode) runs no-op jobs that one
producer enqueues at a steady RATE (enqueue_many every 20 ms). From HOLD-START on, another
connection (application_name ``bench-held-snapshot``) holds a REPEATABLE READ snapshot for
HOLD-MINUTES, idle in transaction, then commits. Autovacuum is the server's own (the run
says whether it is on). Each second the orchestrator records the jobs handled (the probe, no
SQL), the pending backlog and the jobs table's dead tuples; every 20 s it asks
``pgjobs_health`` and the dashboard's health data whether they flag the held snapshot. At the
end, per 5 s of finish time: jobs finished and the claim latency (started_at - created_at,
the database clock) p50/p99.

Results: bench/results/bloat.json, bloat.md, bloat.png (throughput, claim latency, dead
tuples over time, the hold shaded).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import envs  # noqa: E402

envs.run_in_core(__file__)  # re-run inside bench/.venvs/core, like run.py

import argparse  # noqa: E402

import harness  # noqa: E402
import probe  # noqa: E402  (harness put bench/drivers on sys.path)
import psycopg  # noqa: E402
from benchlib import cli, procs  # noqa: E402
from harness import log  # noqa: E402
from systems import DRIVERS, PgJobs  # noqa: E402

DB = "bench_bloat"
HELD_APP = "bench-held-snapshot"
BUCKET_S = 5


def parse(argv: list[str]) -> argparse.Namespace:
    ap = cli.parser(__doc__)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--hold-start", type=float, help="minutes in (default: centred)")
    ap.add_argument("--hold-minutes", type=float, default=8.0)
    ap.add_argument("--rate", type=float, default=1000.0, help="jobs/s enqueued")
    ap.add_argument("--health-every", type=float, default=20.0, metavar="SECONDS")
    ap.add_argument(
        "--snapshot-age",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="pgjobs_health --max-snapshot-age (default: its default, 60)",
    )
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--name", default="bloat", help="results file names (default bloat.*)")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="summarize and plot NAME.json again (no measurement)",
    )
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    a = parse(argv)
    if a.report_only:
        return report(json.loads((Path(a.out) / f"{a.name}.json").read_text()), Path(a.out), a.name)
    hold_start = (
        a.hold_start if a.hold_start is not None else (a.minutes - a.hold_minutes) / 2
    ) * 60
    hold_end = hold_start + a.hold_minutes * 60
    total = a.minutes * 60
    ctx = harness.Ctx(harness.parse_args(["--only", "pgjobs", "--pg-url", a.pg_url]))
    system = PgJobs(ctx)
    system.build()
    system.db, system.url = DB, ctx.pg_url(DB)
    harness.setup_schema(ctx, system)
    settings = server_settings(system)
    log(
        f"soak: {a.rate:.0f} jobs/s for {a.minutes:g} min, snapshot held from "
        f"{hold_start:.0f}s to {hold_end:.0f}s; autovacuum={settings['autovacuum']}"
    )
    probe_path = f"/dev/shm/bench-probe-{os.getpid()}-bloat"
    probe.create(probe_path)
    reader = probe.Reader(probe_path)
    env = dict(system.env(), BENCH_PROBE_FILE=probe_path)
    wargv, cwd = system.worker_argv(burst=False)
    worker = procs.Proc(
        wargv, env=env, cwd=cwd, log_path=ctx.tmp / "bloat-worker.log", name="bloat-worker"
    )
    producer = procs.Proc(
        [system.python, str(DRIVERS / "pgjobs_scale.py"), "steady", str(a.rate), str(total)],
        env=system.env(),
        log_path=ctx.tmp / "bloat-producer.log",
        name="bloat-producer",
    )
    samples, checks = [], []
    held = None
    t0 = time.monotonic()
    next_health = 5.0
    try:
        with psycopg.connect(system.url, autocommit=True) as c:
            while (t := time.monotonic() - t0) < total + 30:
                if held is None and hold_start <= t < hold_end:
                    held = hold(system)
                elif held is not None and not held.closed and t >= hold_end:
                    held.commit()
                    held.close()
                    log("snapshot released")
                samples.append(sample(c, t, reader))
                if t >= next_health:
                    checks.append(health_check(ctx, system, t, a.snapshot_age))
                    next_health += a.health_every
                if worker.poll() is not None:
                    raise RuntimeError(f"worker exited ({worker.rc})\n{worker.tail()}")
                if t > total and samples[-1]["pending"] == 0:
                    break
                time.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - t)))
        producer.wait(30)
    finally:
        if held is not None and not held.closed:
            held.close()
        producer.stop()
        worker.stop()
        reader.close()
        os.unlink(probe_path)
    results = {
        "command": "python3 bench/bloat.py " + " ".join(argv),
        "rate": a.rate,
        "minutes": a.minutes,
        "hold": [hold_start, hold_end],
        "snapshot_age": a.snapshot_age,
        "server": settings,
        "machine": harness.machine_info(ctx),
        "samples": samples,
        "health": checks,
        "buckets": buckets(system),
    }
    harness.drop_db(ctx, DB)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.name}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    return report(results, out, a.name)


def report(results: dict, out: Path, name: str) -> int:
    results["summary"] = summarize(results)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / f"{name}.md").write_text(render(results, name))
    plot(results, out / f"{name}.png")
    print((out / f"{name}.md").read_text())
    return 0


def server_settings(system) -> dict:
    names = (
        "autovacuum",
        "autovacuum_naptime",
        "autovacuum_vacuum_scale_factor",
        "autovacuum_vacuum_cost_limit",
        "shared_buffers",
        "server_version",
    )
    with psycopg.connect(system.url, autocommit=True) as c:
        return {n: c.execute(f"SHOW {n}").fetchone()[0] for n in names}


def hold(system) -> psycopg.Connection:
    conn = psycopg.connect(system.url, application_name=HELD_APP)
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM pgjobs_worker")  # the snapshot is taken here
    log(f"snapshot held by pid {conn.info.backend_pid}")
    return conn


def sample(c: psycopg.Connection, t: float, reader: probe.Reader) -> dict:
    row = c.execute(
        """SELECT (SELECT count(*) FROM pgjobs_job WHERE status = 'PENDING'),
                  n_dead_tup, n_live_tup, autovacuum_count, pg_relation_size(relid),
                  pg_relation_size('pgjobs_job_claim_idx')
           FROM pg_stat_user_tables WHERE relname = 'pgjobs_job'"""
    ).fetchone()
    return {
        "t": round(t, 3),
        "handled": reader.total(),
        "pending": row[0],
        "dead": row[1],
        "live": row[2],
        "autovacuums": row[3],
        "table_bytes": row[4],
        "claim_idx_bytes": row[5],
    }


def health_check(ctx, system, t: float, age: float) -> dict:
    try:
        res = procs.run_json(
            [system.python, str(DRIVERS / "pgjobs_scale.py"), "health", str(age)],
            env=system.env(),
            timeout=60,
            log_path=ctx.tmp / "bloat.log",
        )
    except Exception as exc:  # noqa: BLE001 - a failed check is recorded, the soak goes on
        return {"t": t, "error": str(exc)}
    flagged = [h for h in res["dashboard"] if h["application_name"] == HELD_APP]
    named = [p for p in res["problems"] if HELD_APP in p]
    return {
        "t": round(t, 1),
        "health_flags_it": bool(named),
        "dashboard_flags_it": bool(flagged),
        "problems": res["problems"],
        "held": flagged,
    }


def buckets(system) -> list[dict]:
    with psycopg.connect(system.url, autocommit=True) as c:
        rows = c.execute(
            f"""SELECT floor(extract(epoch FROM finished_at - t0.t) / {BUCKET_S})::int AS b,
                       count(*),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY started_at - created_at),
                       percentile_cont(0.99) WITHIN GROUP (ORDER BY started_at - created_at)
                FROM pgjobs_job, (SELECT min(created_at) AS t FROM pgjobs_job) t0
                WHERE finished_at IS NOT NULL GROUP BY b ORDER BY b"""
        ).fetchall()
    return [
        {
            "t": b * BUCKET_S,
            "jobs_per_s": n / BUCKET_S,
            "claim_ms_p50": p50.total_seconds() * 1000,
            "claim_ms_p99": p99.total_seconds() * 1000,
        }
        for b, n, p50, p99 in rows
    ]


def rates(samples: list[dict]) -> list[tuple[float, float]]:
    """Jobs handled per second, from the probe counts of consecutive samples."""
    return [
        (b["t"], (b["handled"] - a["handled"]) / (b["t"] - a["t"]))
        for a, b in zip(samples, samples[1:], strict=False)
        if b["t"] > a["t"]
    ]


def summarize(r: dict) -> dict:
    start, end = r["hold"]
    per_s = rates(r["samples"])
    before = [v for t, v in per_s if 30 <= t < start]
    during = [(t, v) for t, v in per_s if start <= t < end]
    after = [(t, v) for t, v in per_s if t >= end]
    base = statistics.median(before) if before else r["rate"]
    window = 10
    low10 = (
        min(
            (
                statistics.fmean(v for _, v in during[i : i + window])
                for i in range(max(1, len(during) - window + 1))
            ),
            default=None,
        )
        if len(during) >= window
        else None
    )
    back = None  # first second after the hold from which 10 s in a row run at >= 90% of base
    for i in range(len(after) - window + 1):
        if all(v >= 0.9 * base for _, v in after[i : i + window]):
            back = after[i][0] - end
            break
    base_pending = (
        statistics.median(s["pending"] for s in r["samples"] if 30 <= s["t"] < start)
        if any(30 <= s["t"] < start for s in r["samples"])
        else 0
    )
    cleared = next(
        (
            s["t"] - end
            for s in r["samples"]
            if s["t"] >= end and s["pending"] <= max(2 * base_pending, 100)
        ),
        None,
    )
    minutes = [
        statistics.fmean(v for t, v in per_s if m <= t < m + 60) or 0.0
        for m in range(0, int(max(t for t, _ in per_s)) - 59, 60)
    ]
    b = r["buckets"]
    lat_before = [x["claim_ms_p99"] for x in b if 30 <= x["t"] < start]
    lat_during = [x["claim_ms_p99"] for x in b if start <= x["t"] < end]
    dead = [s["dead"] for s in r["samples"]]
    return {
        "baseline_jobs_per_s": base,
        "lowest_10s_jobs_per_s_during_hold": low10,
        "fall": (low10 / base) if low10 and base else None,
        "throughput_back_after_s": back,
        "backlog_cleared_after_s": cleared,
        "lowest_minute_jobs_per_s_during_hold": min(
            (v for i, v in enumerate(minutes) if start <= i * 60 and (i + 1) * 60 <= end),
            default=None,
        ),
        "jobs_per_s_by_minute": [round(v) for v in minutes],
        "claim_p99_ms_before": statistics.median(lat_before) if lat_before else None,
        "claim_p99_ms_worst_during": max(lat_during) if lat_during else None,
        "max_dead_tuples": max(dead) if dead else None,
        "claim_index_mb_before_after_hold": [
            _at(r["samples"], start)["claim_idx_bytes"] / 2**20,
            _at(r["samples"], end)["claim_idx_bytes"] / 2**20,
        ],
        "max_pending": max(s["pending"] for s in r["samples"]),
        "health_flagged_during_hold": [
            c["health_flags_it"]
            for c in r["health"]
            if start + r["snapshot_age"] + 2 < c["t"] < end
        ],
        "dashboard_flagged_during_hold": [
            c["dashboard_flags_it"]
            for c in r["health"]
            if start + r["snapshot_age"] + 2 < c["t"] < end
        ],
        "flagged_outside_hold": [
            c["t"]
            for c in r["health"]
            if c.get("health_flags_it") and not start <= c["t"] <= end + 20
        ],
    }


def _at(samples: list[dict], t: float) -> dict:
    return min(samples, key=lambda s: abs(s["t"] - t))


def render(r: dict, name: str) -> str:
    s = r["summary"]
    fmt = json.dumps(s, indent=1)
    return (
        f"# Bloat soak\n\n`{r['command']}` — {r['machine']['date']}\n\n"
        f"{r['rate']:.0f} jobs/s for {r['minutes']:g} min; snapshot held from "
        f"{r['hold'][0]:.0f} s to {r['hold'][1]:.0f} s. Server: {r['server']}\n\n"
        f"![soak]({name}.png)\n\n```\n{fmt}\n```\n"
    )


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    per_s = rates(r["samples"])
    ax[0].plot([t for t, _ in per_s], [v for _, v in per_s], lw=0.6, label="handled per s")
    ax[0].plot(
        [x["t"] for x in r["buckets"]],
        [x["jobs_per_s"] for x in r["buckets"]],
        lw=1.2,
        label=f"finished per s ({BUCKET_S} s buckets)",
    )
    ax[0].set_ylabel("jobs/s")
    ax[0].legend(loc="lower left")
    ax[1].semilogy(
        [x["t"] for x in r["buckets"]],
        [max(x["claim_ms_p50"], 0.01) for x in r["buckets"]],
        label="p50",
    )
    ax[1].semilogy(
        [x["t"] for x in r["buckets"]],
        [max(x["claim_ms_p99"], 0.01) for x in r["buckets"]],
        label="p99",
    )
    ax[1].set_ylabel("claim latency ms\n(started - created)")
    ax[1].legend(loc="upper left")
    ax[2].plot(
        [s["t"] for s in r["samples"]], [s["dead"] for s in r["samples"]], label="dead tuples"
    )
    ax[2].plot(
        [s["t"] for s in r["samples"]], [s["pending"] for s in r["samples"]], label="pending"
    )
    ax[2].set_ylabel("rows (dead: pg_stat_user_tables,\nreset by each autovacuum)")
    ax[2].set_xlabel("seconds")
    ax[2].legend(loc="upper left")
    size = ax[2].twinx()
    size.plot(
        [s["t"] for s in r["samples"]],
        [s["claim_idx_bytes"] / 2**20 for s in r["samples"]],
        color="grey",
        ls="--",
        label="claim index MB",
    )
    size.set_ylabel("claim index MB (dashed)")
    for a in ax:
        a.axvspan(*r["hold"], color="orange", alpha=0.15)
    ax[0].set_title(
        f"Bloat soak: {r['rate']:.0f} jobs/s, snapshot held "
        f"{r['hold'][0]:.0f}-{r['hold'][1]:.0f} s (shaded)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
