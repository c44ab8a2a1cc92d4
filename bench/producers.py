"""Enqueue throughput with 1, 4, 16 and 64 concurrent producers (issue 20 §1).

    python3 bench/run.py --producers [--full] [--only pgjobs,raw_limit,...] [--reps N]

Each producer is a process with its own connection, one job per transaction (autocommit), its
system's public enqueue API (drivers/producer_loop.py). A series starts 64 producers, warms them
up, then runs them 1, 4, 16 and 64 at a time for a few seconds each, all starting at the same
instant; throughput = jobs / seconds summed over the producers. Series take turns round by
round (the order rotates). Series:

  pgjobs          enqueue() (Django, autocommit); no worker runs, so nobody sleeps
  pgjobs+worker   enqueue() while one idle `runjobs` drains them (the doorbell rings at times)
  pgjobs_sql      the INSERT enqueue() sends, from raw psycopg (its doorbell included)
  pgjobs_copy     the same row from raw psycopg into pgjobs_job_copy (LIKE pgjobs_job INCLUDING
                  ALL: the same constraints and indexes) without NOTIFY: the baseline
  pgjobs_notify   pgjobs_copy + one pg_notify per insert (what enqueue() did before)
  raw, raw_plain  raw.py's INSERT with its statement NOTIFY trigger / into a table without it
  peers           each peer's single enqueue (pg-boss, a node client, is not run here;
                  Procrastinate up to 16 producers: it pools connections per process)

Writes bench/results/producers.{json,md,png}.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from benchlib import procs
from harness import RESULTS, Ctx, log, machine_info, reset, setup_schema, sql
from systems import SYSTEMS, System

LEVELS = (1, 4, 16, 64)
SECONDS = {"quick": 2.0, "full": 4.0}
COPY_SQL = (
    "DROP TABLE IF EXISTS pgjobs_job_copy; "
    "CREATE TABLE pgjobs_job_copy (LIKE pgjobs_job INCLUDING ALL)"
)
BASELINE = "pgjobs_copy"
# Procrastinate's connector keeps a pool of connections per producer process: 64 of them
# exceed the server's max_connections (100).
MAX_LEVEL = {"procrastinate": 16}

# series: (name, system key, client command, with an idle worker)
SERIES = [
    ("pgjobs", "pgjobs", "enqueue_single", False),
    ("pgjobs+worker", "pgjobs", "enqueue_single", True),
    ("pgjobs_sql", "pgjobs", "enqueue_single_sql", False),
    (BASELINE, "pgjobs", "enqueue_single_copy", False),
    ("pgjobs_notify", "pgjobs", "enqueue_single_copy_notify", False),
    ("raw", "raw_limit", "enqueue_single", False),
    ("raw_plain", "raw_limit", "enqueue_single_plain", False),
    ("procrastinate", "procrastinate", "enqueue_single", False),
    ("tasksdb", "tasksdb", "enqueue_single", False),
    ("pgqueuer", "pgqueuer", "enqueue_single", False),
]


def start_producers(ctx: Ctx, system: System, cmd: str, n: int, started: list[procs.Proc]) -> None:
    """``n`` producers into ``started`` (the caller stops them, also when one fails to start)."""
    argv, cwd = system.client_argv("serve_producer", cmd)
    for i in range(n):
        started.append(
            procs.Proc(
                argv,
                env=system.env(),
                cwd=cwd,
                pipes=True,
                name=f"{system.key}-{i}",
                log_path=ctx.tmp / f"producers-{system.key}.log",
            )
        )
    for p in started:
        p.reply(timeout=180)  # {"ready": true}: imported, connected, warmed up


def sample(producers: list[procs.Proc], seconds: float) -> dict:
    t0 = time.monotonic() + 0.2
    for p in producers:
        p.send(f"go {t0} {seconds}")
    replies = [p.reply(timeout=seconds + 60) for p in producers]
    jobs = sum(r["n"] for r in replies)
    wall = max(r["seconds"] for r in replies)
    return {"producers": len(producers), "jobs": jobs, "seconds": wall, "rate": jobs / wall}


def run_series(
    ctx: Ctx, system: System, name: str, cmd: str, worker: bool, seconds: float, out: dict
) -> None:
    reset(system)
    if system.key == "pgjobs":
        sql(system, "TRUNCATE pgjobs_job_copy RESTART IDENTITY")
    runner = None
    if worker:
        argv, cwd = system.worker_argv(burst=False)
        runner = procs.Proc(
            argv,
            env=system.env(),
            cwd=cwd,
            name="runjobs",
            log_path=ctx.tmp / "producers-runjobs.log",
        )
        time.sleep(3.0)  # started, listening, asleep
    producers: list[procs.Proc] = []
    try:
        levels = [n for n in LEVELS if n <= MAX_LEVEL.get(name, max(LEVELS))]
        start_producers(ctx, system, cmd, max(levels), producers)
        for level in levels:
            s = sample(producers[:level], seconds)
            out.setdefault(name, {}).setdefault(str(level), []).append(s)
            log(f"producers {name:>15} x{level:<2}: {s['rate']:8.0f} jobs/s")
    finally:
        for p in producers:
            p.send("quit") if p.poll() is None else None
        for p in producers:
            p.stop(grace=5.0)
        if runner is not None:
            runner.stop(grace=10.0)


def run(args) -> int:
    ctx = Ctx(args)
    seconds = SECONDS[ctx.mode]
    keys = {k.strip() for k in args.only.split(",")} if args.only else set(SYSTEMS)
    systems: dict[str, System] = {}
    for key in sorted({s[1] for s in SERIES} & keys):
        system = SYSTEMS[key](ctx)
        system.build()
        if system.skip_reason:
            log(f"skipping {system.label}: {system.skip_reason}")
            continue
        setup_schema(ctx, system)
        if key == "pgjobs":
            sql(system, COPY_SQL)
        systems[key] = system
    wanted = os.environ.get("BENCH_PRODUCER_SERIES")  # e.g. "pgjobs,pgjobs+worker,pgjobs_copy"
    series = [s for s in SERIES if s[1] in systems and (not wanted or s[0] in wanted.split(","))]
    out = Path(args.out) if args.out else RESULTS
    out.mkdir(parents=True, exist_ok=True)  # before the run, not after 20 minutes of it
    samples: dict = {}
    try:
        for rnd in range(ctx.cfg["reps"]):
            turn = series[rnd % len(series) :] + series[: rnd % len(series)]
            for name, key, cmd, worker in turn:
                try:
                    run_series(ctx, systems[key], name, cmd, worker, seconds, samples)
                except Exception as exc:  # noqa: BLE001 - a failing series is reported
                    log(f"producers {name}: FAILED {exc}")
                    samples.setdefault(name, {})["error"] = str(exc)[:500]
    finally:
        procs.kill_all()
    result = {
        "command": "python3 bench/run.py --producers " + ("--full" if args.full else ""),
        "seconds_per_sample": seconds,
        "levels": LEVELS,
        "machine": machine_info(ctx),
        "samples": samples,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (out / "producers.json").write_text(json.dumps(result, indent=1))
    (out / "producers.md").write_text(render(result))
    plot(result, out / "producers.png")
    log(f"wrote {out / 'producers.md'}")
    return 0


def render(result: dict) -> str:
    samples = result["samples"]

    def median(name: str, level: int) -> float | None:
        rates = [s["rate"] for s in samples.get(name, {}).get(str(level), [])]
        return statistics.median(rates) if rates else None

    lines = [
        "# Enqueue with many producers (bench/producers.py)",
        "",
        f"`{result['command'].strip()}`, {result['finished']}; each sample "
        f"{result['seconds_per_sample']:.0f} s; jobs/s, median (min–max) over rounds; ratio: "
        f"to `{BASELINE}` at the same concurrency (the goal: `pgjobs` ≥ 0.8× at 16 and 64).",
        "",
        "| series | " + " | ".join(f"{n} producers" for n in result["levels"]) + " |",
        "|---|" + "---|" * len(result["levels"]),
    ]
    for name in samples:
        cells = []
        for level in result["levels"]:
            rates = [s["rate"] for s in samples[name].get(str(level), [])]
            if not rates:
                cells.append("—")
                continue
            med, base = statistics.median(rates), median(BASELINE, level)
            ratio = f" **{med / base:.2f}×**" if base and name != BASELINE else ""
            cells.append(f"{med:,.0f} ({min(rates):,.0f}–{max(rates):,.0f}){ratio}")
        if "error" in samples[name]:
            cells[-1] += f" (failed: {samples[name]['error'][:80]})"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Series: see the docstring of bench/producers.py.", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    """Jobs/s against concurrent producers, one line per series (medians, min-max bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    for name, by_level in result["samples"].items():
        levels = [n for n in result["levels"] if by_level.get(str(n))]
        rates = [[s["rate"] for s in by_level[str(n)]] for n in levels]
        mids = [statistics.median(r) for r in rates]
        err = [
            [m - min(r) for m, r in zip(mids, rates, strict=True)],
            [max(r) - m for m, r in zip(mids, rates, strict=True)],
        ]
        ours, base = name.startswith("pgjobs"), name == BASELINE
        ax.errorbar(
            levels,
            mids,
            yerr=err,
            marker="o",
            capsize=3,
            label=name,
            lw=2.4 if name in ("pgjobs", BASELINE) else 1.2,
            ls="--" if base else "-",
            alpha=1.0 if ours else 0.6,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(result["levels"]), [str(n) for n in result["levels"]])
    ax.set_xlabel("concurrent producers (one job per transaction)")
    ax.set_ylabel("jobs/s (median of rounds, min-max)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(f"Enqueue with many producers — {result['finished']}", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)
