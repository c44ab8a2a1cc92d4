"""Enqueue throughput with 1, 4, 16 and 64 concurrent producers (issues 20 §1, 26 §5).

    python3 bench/run.py --producers [--full] [--only pgjobs,raw_limit,...] [--reps N]
    env BENCH_PRODUCER_SERIES=pgjobs,pgjobs+other,pgjobs_copy   (default: all series)
        BENCH_PRODUCER_ARRANGEMENTS=processes,threads            (default: both)
        BENCH_PRODUCER_LEVELS=16,64                              (default: 1,4,16,64)

One job per transaction (autocommit), each system's public enqueue API (drivers/
producer_loop.py), every producer with its own connection, in two arrangements:

  processes   one process per producer
  threads     producers in threads of a few processes: 1 = 1x1, 4 = 2x2, 16 = 4x4, 64 = 8x8
              (a threaded web server); django-pgjobs' series only

A series starts its producers, warms them up, then runs them 1, 4, 16 and 64 at a time for a
few seconds each, all starting at the same instant; throughput = jobs / seconds summed over the
producers. Series take turns round by round (the order rotates); a ratio is taken to the
baseline of the same round and arrangement, and the report gives the median of those ratios.
Series:

  pgjobs          enqueue() (Django, autocommit); no worker runs, so nobody sleeps
  pgjobs+other    enqueue() on `default` while one `runjobs --queues other` sleeps (a quiet
                  fleet: a worker of another queue, with nothing to do)
  pgjobs+worker   enqueue() while one idle `runjobs` drains them (the doorbell rings at times)
  pgjobs_sql      the INSERT enqueue() sends, from raw psycopg (its doorbell included)
  pgjobs_copy     the same row from raw psycopg into pgjobs_job_copy (LIKE pgjobs_job INCLUDING
                  ALL: the same constraints and indexes) without NOTIFY: the baseline
  pgjobs_notify   pgjobs_copy + one pg_notify per insert (what enqueue() did before)
  raw, raw_plain  raw.py's INSERT with its statement NOTIFY trigger / into a table without it
  peers           each peer's single enqueue (pg-boss, a node client, is not run here;
                  Procrastinate up to 16 producers: it pools connections per process)

For django-pgjobs the sample also counts the NOTIFYs sent meanwhile ("rings", heard by a
LISTEN connection of the bench). Writes bench/results/producers.{json,md,png}.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

import psycopg
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
THREADS = {1: (1, 1), 4: (2, 2), 16: (4, 4), 64: (8, 8)}  # producers: (processes, threads)
ARRANGEMENTS = ("processes", "threads")
OTHER_QUEUE = "other"  # pgjobs+other's worker serves it; the producers enqueue on `default`

# series: (name, system key, client command, worker: None, "same" (drains) or "other")
SERIES = [
    ("pgjobs", "pgjobs", "enqueue_single", None),
    ("pgjobs+other", "pgjobs", "enqueue_single", "other"),
    ("pgjobs+worker", "pgjobs", "enqueue_single", "same"),
    ("pgjobs_sql", "pgjobs", "enqueue_single_sql", None),
    (BASELINE, "pgjobs", "enqueue_single_copy", None),
    ("pgjobs_notify", "pgjobs", "enqueue_single_copy_notify", None),
    ("raw", "raw_limit", "enqueue_single", None),
    ("raw_plain", "raw_limit", "enqueue_single_plain", None),
    ("procrastinate", "procrastinate", "enqueue_single", None),
    ("tasksdb", "tasksdb", "enqueue_single", None),
    ("pgqueuer", "pgqueuer", "enqueue_single", None),
]
WORKER_NOTE = {None: "no worker", "other": "a worker asleep on another queue", "same": "a worker"}


def start_producers(
    ctx: Ctx, system: System, cmd: str, n: int, threads: int, started: list[procs.Proc]
) -> None:
    """``n`` processes of ``threads`` producers each into ``started`` (the caller stops them,
    also when one fails to start)."""
    argv, cwd = system.client_argv("serve_producer", cmd, str(threads))
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


class Rings:
    """Counts the NOTIFYs on django-pgjobs' channel (a LISTEN connection of the bench)."""

    def __init__(self, url: str) -> None:
        self.count, self._stop = 0, threading.Event()
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute("LISTEN pgjobs")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in self._conn.notifies(timeout=0.2):
                self.count += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()


def sample(producers: list[procs.Proc], seconds: float, rings: Rings | None) -> dict:
    t0 = time.monotonic() + 0.2
    before = rings.count if rings else 0
    for p in producers:
        p.send(f"go {t0} {seconds}")
    replies = [p.reply(timeout=seconds + 60) for p in producers]
    jobs = sum(r["n"] for r in replies)
    wall = max(r["seconds"] for r in replies)
    out = {"jobs": jobs, "seconds": wall, "rate": jobs / wall}
    if rings:
        time.sleep(0.3)  # notifications of the last commits
        out["rings"] = rings.count - before
    return out


def _worker(ctx: Ctx, system: System, worker: str) -> procs.Proc:
    argv, cwd = system.worker_argv(burst=False)
    if worker == "other":
        argv = [
            OTHER_QUEUE if a == "default" and argv[i - 1] == "--queues" else a
            for i, a in enumerate(argv)
        ]
    runner = procs.Proc(
        argv, env=system.env(), cwd=cwd, name="runjobs", log_path=ctx.tmp / "producers-runjobs.log"
    )
    time.sleep(3.0)  # started, listening, asleep
    return runner


def run_series(ctx: Ctx, system: System, unit: tuple, seconds: float, rnd: int, out: dict) -> None:
    name, cmd, worker, arrangement = unit
    reset(system)
    if system.key == "pgjobs":
        sql(system, "TRUNCATE pgjobs_job_copy RESTART IDENTITY")
    runner = _worker(ctx, system, worker) if worker else None
    rings = Rings(system.url) if system.key == "pgjobs" else None
    producers: list[procs.Proc] = []
    try:
        levels = [n for n in ctx.producer_levels if n <= MAX_LEVEL.get(name, max(LEVELS))]
        if arrangement == "threads":
            n_proc, threads = THREADS[max(levels)]
            start_producers(ctx, system, cmd, n_proc, threads, producers)
        else:
            start_producers(ctx, system, cmd, max(levels), 1, producers)
        for level in levels:
            n_proc = THREADS[level][0] if arrangement == "threads" else level
            s = sample(producers[:n_proc], seconds, rings)
            s.update(producers=level, round=rnd)
            out.setdefault(f"{name} @{arrangement}", {}).setdefault(str(level), []).append(s)
            extra = f" ({s['rings']} rings)" if "rings" in s else ""
            log(
                f"producers {name:>15} {arrangement:>9} x{level:<2}: {s['rate']:8.0f} jobs/s{extra}"
            )
    finally:
        for p in producers:
            p.send("quit") if p.poll() is None else None
        for p in producers:
            p.stop(grace=5.0)
        if rings is not None:
            rings.close()
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
    wanted = os.environ.get("BENCH_PRODUCER_SERIES")  # e.g. "pgjobs,pgjobs+other,pgjobs_copy"
    arrangements = os.environ.get("BENCH_PRODUCER_ARRANGEMENTS", ",".join(ARRANGEMENTS))
    ctx.producer_levels = tuple(
        int(n)
        for n in os.environ.get("BENCH_PRODUCER_LEVELS", ",".join(map(str, LEVELS))).split(",")
    )
    units = [
        (s, (s[0], s[2], s[3], arr))
        for arr in arrangements.split(",")
        for s in SERIES
        if s[1] in systems
        and (not wanted or s[0] in wanted.split(","))
        and (arr == "processes" or s[1] == "pgjobs")
    ]
    out = Path(args.out) if args.out else RESULTS
    out.mkdir(parents=True, exist_ok=True)  # before the run, not after 20 minutes of it
    samples: dict = {}
    try:
        for rnd in range(ctx.cfg["reps"]):
            turn = units[rnd % len(units) :] + units[: rnd % len(units)]
            for series, unit in turn:
                try:
                    run_series(ctx, systems[series[1]], unit, seconds, rnd, samples)
                except Exception as exc:  # noqa: BLE001 - a failing series is reported
                    log(f"producers {unit}: FAILED {exc}")
                    samples.setdefault(f"{unit[0]} @{unit[3]}", {})["error"] = str(exc)[:500]
    finally:
        procs.kill_all()
    result = {
        "command": "python3 bench/run.py --producers " + ("--full" if args.full else ""),
        "env": {k: v for k, v in os.environ.items() if k.startswith("BENCH_PRODUCER_")},
        "seconds_per_sample": seconds,
        "levels": list(ctx.producer_levels),
        "machine": machine_info(ctx),
        "samples": samples,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (out / "producers.json").write_text(json.dumps(result, indent=1))
    (out / "producers.md").write_text(render(result))
    plot(result, out / "producers.png")
    log(f"wrote {out / 'producers.md'}")
    return 0


def ratios(samples: dict, key: str, level: int) -> list[float]:
    """``key``'s rate over the baseline's of the same round and arrangement, round by round."""
    base_key = f"{BASELINE} @{key.rsplit(' @', 1)[1]}"
    base = {s["round"]: s["rate"] for s in samples.get(base_key, {}).get(str(level), [])}
    return [
        s["rate"] / base[s["round"]]
        for s in samples.get(key, {}).get(str(level), [])
        if base.get(s["round"])
    ]


def arrangement_note(key: str, level: int) -> str:
    arrangement = key.rsplit(" @", 1)[1]
    if arrangement == "threads":
        procs_, threads = THREADS[level]
        return f"{procs_} proc × {threads} thr"
    return f"{level} proc"


def render(result: dict) -> str:
    samples = result["samples"]
    env = " ".join(f"{k}={v}" for k, v in result.get("env", {}).items())
    lines = [
        "# Enqueue with many producers (bench/producers.py)",
        "",
        f"`{(env + ' ' if env else '')}{result['command'].strip()}`, {result['finished']}; each "
        f"sample {result['seconds_per_sample']:.0f} s; jobs/s, median (min–max) over rounds; "
        f"ratio: median over rounds of the ratio to `{BASELINE}` of the same round and "
        "arrangement (the goal, issue 26: `pgjobs` and `pgjobs+other` ≥ 0.9× at 16 and 64, "
        "both arrangements). Arrangement: processes = one process per producer; threads = "
        "processes × threads. Rings: NOTIFYs sent per sample (median).",
        "",
        "| series | arrangement | worker | "
        + " | ".join(f"{n} producers" for n in result["levels"])
        + " |",
        "|---|---|---|" + "---|" * len(result["levels"]),
    ]
    for key in samples:
        name, arrangement = key.rsplit(" @", 1)
        worker = next((s[3] for s in SERIES if s[0] == name), None)
        cells = []
        for level in result["levels"]:
            got = samples[key].get(str(level), [])
            if not got:
                cells.append("—")
                continue
            rates = [s["rate"] for s in got]
            cell = f"{statistics.median(rates):,.0f} ({min(rates):,.0f}–{max(rates):,.0f})"
            r = ratios(samples, key, level)
            if r and name != BASELINE:
                cell += f" **{statistics.median(r):.2f}×**"
            if "rings" in got[0]:
                cell += f", {statistics.median(s['rings'] for s in got):,.0f} rings"
            cells.append(f"{cell} [{arrangement_note(key, level)}]")
        if "error" in samples[key]:
            cells[-1] += f" (failed: {samples[key]['error'][:80]})"
        lines.append(
            f"| {name} | {arrangement} | {WORKER_NOTE[worker]} | " + " | ".join(cells) + " |"
        )
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
        if not levels:
            continue
        rates = [[s["rate"] for s in by_level[str(n)]] for n in levels]
        mids = [statistics.median(r) for r in rates]
        err = [
            [m - min(r) for m, r in zip(mids, rates, strict=True)],
            [max(r) - m for m, r in zip(mids, rates, strict=True)],
        ]
        series = name.rsplit(" @", 1)[0]
        ours, base = series.startswith("pgjobs"), series == BASELINE
        ax.errorbar(
            levels,
            mids,
            yerr=err,
            marker="o",
            capsize=3,
            label=name,
            lw=2.4 if series in ("pgjobs", "pgjobs+other", BASELINE) else 1.2,
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
