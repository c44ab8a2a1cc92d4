"""The benchmark orchestrator (runs in bench/.venvs/core; started by bench/run.py).

For every selected system, in one run:

  enqueue_single      N jobs, one per transaction, through the system's public enqueue API
  enqueue_single_plain (raw only) the same with a plain INSERT into a table without trigger
  enqueue_single_sql  (django-pgjobs only) the INSERT enqueue() sends, from raw psycopg
  enqueue_bulk        one bulk call of N jobs (COPY for raw)
  drain_w1 / drain_w2 N pending no-op jobs, 1 or 2 worker processes, burst mode where the
                      system has one
  pickup              one idle worker; latency from the producer's COMMIT to the handler start
  drain_w1_finished   drain_w1 with F finished rows already in the system's tables
  drain_w1_alongside  (django-pgjobs only) the same drains without the finished rows: on a
                      twin database with the same history, taking turns with them
  drain_w1_nostats    drain_w1 on a fresh table without planner statistics
  drain_w1_burststats drain_w1 after an ANALYZE that saw only the pending burst

Timing of a drain: from the first handler start (any worker) to the moment the database
shows no unfinished job.  Handlers report into a shared-memory probe (drivers/probe.py), so
the orchestrator only queries the database in the tail of the drain, once every handler
has run.  Worker start-up is reported separately (startup_s) and not counted.

Timing of the single enqueues (all three kinds, every system): before the per-system phases,
in turns; within a turn every series has one long-lived producer, and the producers take
turns every 100 jobs (--single-block), only one of them working at any time, each timing
its own calls (see enqueue_single_phase).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
import probe  # noqa: E402
from benchlib import envs, foreign, procs  # noqa: E402
from systems import ALIASES, SYSTEMS, System  # noqa: E402

BENCH = envs.BENCH_DIR
RESULTS = BENCH / "results"

MODES = {
    # quick: a smoke-level run of everything, well under 2 minutes once the environments exist
    "quick": dict(
        reps=1,
        single_turns=1,
        enqueue_single_n=400,
        enqueue_bulk_n=5_000,
        drain_n=3_000,
        pilot_n=300,
        drain_budget_s=1.5,
        pickup_samples=30,
        pickup_budget_s=2.5,
        finished_rows=100_000,
        drain_timeout_s=60,
        total_budget_s=110,
        profile_n=5_000,
        soak_n=20_000,
        soak_rounds=5,
    ),
    # full: 3 repetitions, 20,000-job drains, 1M finished rows, under 15 minutes; the single
    # enqueues, the noisiest series (a commit's flush drifts from second to second), 5 turns
    "full": dict(
        reps=3,
        single_turns=5,
        enqueue_single_n=2_000,
        enqueue_bulk_n=20_000,
        drain_n=20_000,
        pilot_n=1_000,
        drain_budget_s=6.0,
        pickup_samples=120,
        pickup_budget_s=5.0,
        finished_rows=1_000_000,
        drain_timeout_s=180,
        total_budget_s=840,
        profile_n=20_000,
        soak_n=100_000,
        soak_rounds=10,
    ),
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Ctx:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode = "full" if args.full else "quick"
        self.cfg = dict(MODES[self.mode], single_block=args.single_block)
        if args.reps:
            self.cfg["reps"] = args.reps
        u = urlsplit(args.pg_url)
        self.pg = {
            "host": u.hostname or "127.0.0.1",
            "port": u.port or 5432,
            "user": u.username or "postgres",
            "password": u.password or "",
        }
        self.base_python = envs.find_python()
        self.pgjobs_args = args.pgjobs_args.split() if args.pgjobs_args else []
        self.pgjobs_src, self.pgjobs_venv, self.pgjobs_db = (
            args.pgjobs_src,
            args.pgjobs_venv,
            args.pgjobs_db,
        )
        if self.pgjobs_db and not re.fullmatch(r"bench_[a-z0-9_]+", self.pgjobs_db):
            raise SystemExit(
                f"--pgjobs-db {self.pgjobs_db!r}: the name must match bench_[a-z0-9_]+"
            )
        self.git_head = _git("rev-parse", "HEAD")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        old = sorted((RESULTS / "tmp").glob("2*")) if (RESULTS / "tmp").is_dir() else []
        for d in old[:-2]:  # keep the logs of the last 2 runs (worker logs can be large)
            shutil.rmtree(d, ignore_errors=True)
        self.tmp = RESULTS / "tmp" / stamp
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + args.budget if args.budget else None

    def pg_url(self, db: str) -> str:
        auth = quote(self.pg["user"])
        if self.pg["password"]:
            auth += ":" + quote(self.pg["password"])
        return f"postgresql://{auth}@{self.pg['host']}:{self.pg['port']}/{db}"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(envs.REPO_DIR), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# --- database administration -----------------------------------------------------------------


def admin(ctx: Ctx) -> psycopg.Connection:
    return psycopg.connect(ctx.pg_url("postgres"), autocommit=True)


def recreate_db(ctx: Ctx, name: str) -> None:
    assert re.fullmatch(r"bench_[a-z0-9_]+", name), name  # never touch anything but bench_*
    with admin(ctx) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')


def drop_db(ctx: Ctx, name: str) -> None:
    assert re.fullmatch(r"bench_[a-z0-9_]+", name), name
    with admin(ctx) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(system: System, statement: str, fetch: bool = False):
    with psycopg.connect(system.url, autocommit=True) as c:
        cur = c.execute(statement)
        return cur.fetchall() if fetch else None


def reset(system: System) -> None:
    sql(system, "TRUNCATE " + ", ".join(system.truncate) + " RESTART IDENTITY CASCADE")


def checkpoint(system: System) -> None:
    """CHECKPOINT before a prefill: the prefill, not the timed drain, pays the full-page
    writes of the pages it touches first (as in a steady state, where a page is written in
    full once per checkpoint cycle), and no timed checkpoint falls due during the drain."""
    with psycopg.connect(system.url, autocommit=True) as c:
        try:
            c.execute("CHECKPOINT")
        except psycopg.Error:
            pass


def vacuum(system: System, analyze: bool = False) -> None:
    """VACUUM before a measurement (the server may run without autovacuum).

    No ANALYZE by default: the planner statistics are set once per phase (see run_system):
    the drains run with the statistics of a table of finished jobs, the steady state that
    autovacuum leaves behind.  Claim queries are sensitive to other states, measured on
    purpose: drain_w1_nostats (a fresh table: some claims sort every pending job) and
    drain_w1_burststats (ANALYZE saw only the pending burst: the raw limit's claim turns
    into a hash join over a sequential scan).
    """
    with psycopg.connect(system.url, autocommit=True) as c:
        for t in system.vacuum:
            c.execute(f"VACUUM (ANALYZE) {t}" if analyze else f"VACUUM {t}")


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy over `seconds` (from /proc/stat)."""

    def snap():
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = f[3] + (f[4] if len(f) > 4 else 0)
        return sum(f), idle

    t1, i1 = snap()
    time.sleep(seconds)
    t2, i2 = snap()
    return 0.0 if t2 == t1 else 1 - (i2 - i1) / (t2 - t1)


def wait_quiet(max_s: float, threshold: float = 0.15) -> float:
    """Wait (bounded) until other work on the machine stops; returns the last busy fraction."""
    deadline = time.monotonic() + max_s
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        log(
            f"machine is {busy:.0%} busy with other work; waiting "
            f"(up to {deadline - time.monotonic():.0f}s more)"
        )
        time.sleep(4)
        busy = cpu_busy()
    return busy


def measured(ctx: Ctx, what: str, fn, retry: bool = True) -> dict:
    """Run one sample; repeat it (bounded) when other work used the CPUs meanwhile.

    The foreign CPU (benchlib/foreign.py: everything but the bench's own processes and the
    PostgreSQL backends of bench_* databases) is stored with the sample; samples thrown
    away are kept in the JSON under "discarded".
    """
    discarded = []
    for attempt in range(ctx.args.retries + 1):
        meter = foreign.Meter()
        sample = fn()
        load = meter.stop()
        sample["foreign_cpu_cores"] = round(load, 3)
        if load <= ctx.args.foreign_limit or attempt == ctx.args.retries or not retry:
            if discarded:
                sample["discarded"] = discarded
            return sample
        discarded.append({k: v for k, v in sample.items() if not isinstance(v, list)})
        log(f"    {what}: other work used {load:.2f} cores meanwhile; measuring again")
        wait_quiet(max(ctx.args.wait_quiet, 30))
    return sample


# --- phases -----------------------------------------------------------------------------------


def client(ctx: Ctx, system: System, *args, timeout: float = 300, extra_env=None) -> dict:
    argv, cwd = system.client_argv(*[str(a) for a in args])
    env = system.env()
    if extra_env:
        env.update(extra_env)
    return procs.run_json(
        argv, env=env, cwd=cwd, timeout=timeout, log_path=ctx.tmp / f"{system.key}.log"
    )


def setup_schema(ctx: Ctx, system: System) -> None:
    recreate_db(ctx, system.db)
    for argv, cwd in system.schema_cmds():
        with open(ctx.tmp / f"{system.key}.log", "ab") as lg:
            lg.write(("\n$ " + " ".join(argv) + "\n").encode())
            lg.flush()
            res = subprocess.run(
                argv,
                env=system.env(),
                cwd=cwd,
                stdout=lg,
                stderr=lg,
                stdin=subprocess.DEVNULL,
                timeout=180,
            )
        if res.returncode != 0:
            raise RuntimeError(
                f"schema setup failed: {' '.join(argv)} (see {ctx.tmp / system.key}.log)"
            )


@contextlib.contextmanager
def on_database(system: System, db: str):
    """Point ``system`` (its SQL, clients and workers) at another bench_* database meanwhile."""
    saved = system.db, system.url
    system.db, system.url = db, system.ctx.pg_url(db)
    try:
        yield
    finally:
        system.db, system.url = saved


def setup_twin(ctx: Ctx, system: System, twin: str, n: int) -> None:
    """Database ``twin`` with the system's schema and one drain of n jobs behind it (the
    planner statistics of a table of finished jobs, as the other drains have)."""
    with on_database(system, twin):
        setup_schema(ctx, system)
        drain(ctx, system, n, 1)  # untimed: leaves n finished jobs to take statistics from
        vacuum(system, analyze=True)


def drain_n(ctx: Ctx, system: System, result: dict) -> int:
    """Jobs per drain: drain_n, fewer for a system too slow to drain that many in
    drain_budget_s (sized by a pilot drain, which also warms the server up)."""
    n, cfg = ctx.cfg["drain_n"], ctx.cfg
    try:
        pilot = drain(ctx, system, cfg["pilot_n"], 1)
    except Exception as exc:  # noqa: BLE001 - the real drains will report the problem
        log(f"  {system.key:14s} pilot drain failed: {exc}")
        return min(n, cfg["pilot_n"])
    result["pilot"] = pilot
    if ctx.args.drain_n:  # fixed (bench/ab.py: both sides drain the same N); pilot = warm-up
        return ctx.args.drain_n
    fit = int(pilot["rate"] * cfg["drain_budget_s"] / 100) * 100
    return max(min(n, fit), cfg["pilot_n"])


def drain(
    ctx: Ctx,
    system: System,
    n: int,
    workers: int,
    *,
    keep_rows: bool = False,
    profile: str | None = None,
    analyze: bool = False,
) -> dict:
    """Prefill n jobs, start `workers` worker processes, time until all n are finished."""
    if not keep_rows:
        reset(system)
    checkpoint(system)
    client(ctx, system, "prefill", n)
    vacuum(system, analyze=analyze)
    probe_path = f"/dev/shm/bench-probe-{os.getpid()}-{system.key}"
    probe.create(probe_path)
    reader = probe.Reader(probe_path)
    env = system.env()
    env["BENCH_PROBE_FILE"] = probe_path
    started: list[procs.Proc] = []
    timeout = ctx.cfg["drain_timeout_s"]
    t_spawn = time.monotonic_ns()
    try:
        for w in range(workers):
            argv, cwd = system.worker_argv(burst=True)
            e = (
                dict(env, BENCH_PROBE_SLOT=str(probe.PY_SLOTS + w))
                if system.key == "pgboss"
                else env
            )
            started.append(
                procs.Proc(
                    argv,
                    env=e,
                    cwd=cwd,
                    log_path=ctx.tmp / f"{system.key}-worker.log",
                    name=f"{system.key}-w{w}",
                )
            )
        prof = None
        if profile:
            prof = start_profiler(ctx, system, started[0], profile)
        deadline = time.monotonic() + timeout
        t_end = None
        next_mem = 0.0
        with psycopg.connect(system.url, autocommit=True) as c:
            while time.monotonic() < deadline:
                now = time.monotonic()
                if now >= next_mem:
                    for p in started:
                        p.sample_memory()
                    next_mem = now + 0.1
                total = reader.total()
                if total >= n:
                    if c.execute(system.remaining_sql).fetchone()[0] == 0:
                        t_end = time.monotonic_ns()
                        break
                    time.sleep(0.001)
                    continue
                if all(p.poll() is not None for p in started):
                    # every worker exited before the probe saw all jobs: done or broken?
                    if c.execute(system.remaining_sql).fetchone()[0] == 0 and reader.total() >= n:
                        t_end = time.monotonic_ns()
                        break
                    bad = [p for p in started if p.rc != 0]
                    raise RuntimeError(
                        f"workers exited with {[p.rc for p in started]} after {reader.total()}/{n} "
                        f"jobs\n{(bad or started)[0].tail()}"
                    )
                time.sleep(0.002)
        if t_end is None:
            raise RuntimeError(f"drain did not finish in {timeout}s ({reader.total()}/{n} handled)")
        first = reader.first_ns()
        # burst workers should now see an empty queue and exit on their own
        for p in started:
            p.wait(10.0 if system.burst_exits else 0.0)
        if prof is not None:
            stop_profiler(prof)
    finally:
        for p in started:
            p.stop()
        reader.close()
        try:
            os.unlink(probe_path)
        except OSError:
            pass
    seconds = (t_end - first) / 1e9
    return {
        "n": n,
        "workers": workers,
        "seconds": seconds,
        "rate": n / seconds,
        "startup_s": (first - t_spawn) / 1e9,
        "wall_s": (t_end - t_spawn) / 1e9,
        "rss_mb": max(p.maxrss_kb for p in started) / 1024,
        "rss_tree_mb": max(max(p.tree_kb, p.maxrss_kb) for p in started) / 1024,
        "exit_codes": [p.rc for p in started],
        "loadavg1": os.getloadavg()[0],
    }


def pickup(ctx: Ctx, system: System) -> list[dict]:
    reset(system)
    checkpoint(system)
    probe_path = f"/dev/shm/bench-probe-{os.getpid()}-{system.key}-pickup"
    probe.create(probe_path)
    env = system.env()
    env["BENCH_PROBE_FILE"] = probe_path
    if system.key == "pgboss":
        env["BENCH_PROBE_SLOT"] = str(probe.PY_SLOTS)
    argv, cwd = system.worker_argv(burst=False)
    w = procs.Proc(
        argv,
        env=env,
        cwd=cwd,
        log_path=ctx.tmp / f"{system.key}-worker.log",
        name=f"{system.key}-listen",
    )
    samples = []
    try:

        def one() -> dict:
            res = client(
                ctx,
                system,
                "pickup",
                ctx.cfg["pickup_samples"],
                ctx.cfg["pickup_budget_s"],
                *system.pickup_gap,
                timeout=ctx.cfg["pickup_budget_s"] + 120,
                extra_env={"BENCH_PROBE_FILE": probe_path},
            )
            if w.poll() is not None:
                raise RuntimeError(f"pickup worker exited ({w.rc})\n{w.tail()}")
            lat = sorted(res["latencies_ms"])
            if not lat:
                raise RuntimeError(f"no pickup sample ({res.get('timeouts')} timeouts)")
            return {
                "n": len(lat),
                "timeouts": res.get("timeouts", 0),
                "p50": pct(lat, 50),
                "p95": pct(lat, 95),
                "p99": pct(lat, 99),
                "mean": statistics.fmean(lat),
                "max": lat[-1],
                "latencies_ms": lat,
            }

        for _ in range(ctx.cfg["reps"]):
            samples.append(measured(ctx, f"{system.key} pickup", one))
    finally:
        w.stop()
        try:
            os.unlink(probe_path)
        except OSError:
            pass
    return samples


def soak(ctx: Ctx, system: System) -> list[dict]:
    """One long-lived worker (its normal, listening mode) runs soak_n jobs fed in soak_rounds
    bulk enqueues; its resident memory after each round shows whether it grows."""
    reset(system)
    checkpoint(system)
    vacuum(system, analyze=True)
    probe_path = f"/dev/shm/bench-probe-{os.getpid()}-{system.key}-soak"
    probe.create(probe_path)
    reader = probe.Reader(probe_path)
    env = dict(system.env(), BENCH_PROBE_FILE=probe_path)
    argv, cwd = system.worker_argv(burst=False)
    w = procs.Proc(
        argv,
        env=env,
        cwd=cwd,
        log_path=ctx.tmp / f"{system.key}-soak.log",
        name=f"{system.key}-soak",
    )
    per = ctx.cfg["soak_n"] // ctx.cfg["soak_rounds"]
    rss_mb: list[float] = []
    t0 = time.monotonic()
    try:
        for r in range(ctx.cfg["soak_rounds"]):
            client(ctx, system, "prefill", per)
            deadline = time.monotonic() + ctx.cfg["drain_timeout_s"]
            while reader.total() < per * (r + 1):
                if w.poll() is not None:
                    raise RuntimeError(f"soak worker exited ({w.rc})\n{w.tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"soak round {r + 1} did not finish ({reader.total()} jobs)")
                time.sleep(0.01)
            rss_mb.append(procs.vm_kb(w.pid, "VmRSS") / 1024)
    finally:
        w.stop()
        reader.close()
        try:
            os.unlink(probe_path)
        except OSError:
            pass
    n = per * len(rss_mb)
    return [
        {
            "n": n,
            "rate": n / (time.monotonic() - t0),
            "rss_mb_after_round": rss_mb,
            "growth_mb": rss_mb[-1] - rss_mb[0],
            "rss_mb": max(rss_mb),
        }
    ]


def pct(sorted_values: list[float], p: float) -> float:
    """Percentile with linear interpolation (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


# --- profiling (django-pgjobs only) ------------------------------------------------------------


def start_profiler(ctx: Ctx, system: System, proc: procs.Proc, tag: str):
    spy = Path(system.python).parent / "py-spy"
    if not spy.exists():
        log("py-spy is not in the pgjobs environment; skipping the profile")
        return None
    out = ctx.tmp / f"{system.key}-profile-{tag}.txt"
    argv = [
        str(spy),
        "record",
        "--pid",
        str(proc.pid),
        "--rate",
        "250",
        "--threads",
        "--idle",
        "--format",
        "raw",
        "--output",
        str(out),
        "--nonblocking",
    ]
    return procs.Proc(argv, env=dict(os.environ), log_path=ctx.tmp / "py-spy.log", name="py-spy")


def stop_profiler(prof) -> None:
    prof.p.send_signal(signal.SIGINT)
    prof.wait(10)


# Left out of --quick unless --metrics names them: the two planner-statistics variants of
# drain_w1 and the soak (the memory target is judged on the full run's 100,000 jobs).
QUICK_SKIPS = {"drain_w1_nostats", "drain_w1_burststats", "soak"}


# --- single enqueues, every system in turn ----------------------------------------------------

SINGLE_METRICS = ("enqueue_single", "enqueue_single_sql", "enqueue_single_plain")


def enqueue_sample(ctx: Ctx, system: System, cmd: str, n: int) -> dict:
    """One producer run of ``cmd`` (enqueue_single, enqueue_bulk, ...) on an emptied table."""

    def one():
        reset(system)
        return client(ctx, system, cmd, n)

    return measured(ctx, f"{system.key} {cmd}", one)


SINGLE_READY_TIMEOUT_S = 120  # a producer's start-up and warm-up (Django, node + pg-boss)
SINGLE_BLOCK_TIMEOUT_S = 60


def enqueue_single_phase(ctx: Ctx, systems: list[System], results: dict) -> None:
    """One-job transactions of every system, interleaved block by block within each turn.

    A one-job transaction waits for its commit's WAL flush, whose latency drifts from second
    to second on a shared machine (here the same client's median moved by 1.5x between runs).
    Measured one system after another, the ratios followed the drift; taking turns sample by
    sample (2,000 jobs, ~0.5 s each), the ratio of django-pgjobs to the raw INSERT still swung
    from 0.62x to 0.80x between full runs of the same code. So each turn runs every series as
    one long-lived producer and hands them blocks of ``single_block`` jobs (100) one at a
    time, in an order that rotates every block (see single_turn): every series sees the same
    stretches of the drift. A turn gives one sample per series (its blocks' times summed).
    ``--single-block 0`` measures the old way, for comparison: a producer process per sample,
    series in turns sample by sample. The per-system phase later skips what is done here.
    """
    pairs = [
        (s, cmd)
        for s in systems
        if not s.skip_reason
        for cmd in SINGLE_METRICS
        if cmd in s.metrics and cmd in ctx.metrics
    ]
    if not pairs:
        return
    for s in {s.key: s for s, _ in pairs}.values():
        setup_schema(ctx, s)
    n, block = ctx.cfg["enqueue_single_n"], ctx.cfg["single_block"]
    samples = {(s.key, cmd): [] for s, cmd in pairs}
    turns = max(ctx.cfg["reps"], ctx.cfg["single_turns"])
    log(
        f"single enqueues: {len(pairs)} series, {turns} turns, {n:,} jobs each"
        + (f" in blocks of {block}" if block else "")
    )
    live = list(pairs)  # a series that fails once is out of the run

    def fail(s: System, cmd: str, exc: Exception) -> None:
        live.remove((s, cmd))
        results["systems"].setdefault(s.key, {}).setdefault("phase_errors", []).append(
            f"{cmd}: {exc}"
        )
        log(f"  {s.key:14s} {cmd:22s} FAILED: {exc}")

    for rep in range(turns):
        if not live:
            break
        if block:
            turn = measured(
                ctx,
                f"single enqueues, turn {rep + 1}",
                lambda: single_turn(ctx, list(live), n, block, fail),
            )
            for pair, sample in turn["series"].items():
                sample["foreign_cpu_cores"] = turn["foreign_cpu_cores"]
                redone = [
                    dict(d["series"][pair], foreign_cpu_cores=d["foreign_cpu_cores"])
                    for d in turn.get("discarded", [])
                    if pair in d["series"]
                ]
                if redone:
                    sample["discarded"] = redone
                samples[pair].append(sample)
            continue
        k = rep % len(live)
        for s, cmd in live[k:] + live[:k]:
            try:
                samples[(s.key, cmd)].append(enqueue_sample(ctx, s, cmd, n))
            except Exception as exc:  # noqa: BLE001 - that series is reported as failed
                fail(s, cmd, exc)
    for (key, cmd), got in samples.items():
        if len(got) == turns:
            results["systems"].setdefault(key, {}).setdefault("metrics", {})[cmd] = {
                "samples": got,
                "interleaved": True,
                "block": block,
            }
            log(f"  {key:14s} {cmd:22s} {summarize(cmd, got)}")


def single_turn(ctx: Ctx, series: list[tuple[System, str]], n: int, block: int, fail) -> dict:
    """One turn of the single enqueues: n jobs per series in blocks of ``block``.

    Every series gets a long-lived ``serve_single`` producer (drivers/clientlib.py, node:
    pgboss/client.mjs), started on emptied tables and warmed up before the first block. Then,
    block by block, each producer in turn enqueues ``block`` jobs while the others wait on
    their stdin: one producer works at any time, and the order rotates every block (A B C,
    B C A, ...), so that no series always comes first. The producer times its calls alone,
    without the round trip of the command. A producer that dies or does not answer goes to
    ``fail`` (out of the run). Returns {"series": {(system key, cmd): sample}} for the series
    that got through.
    """
    for s in {s.key: s for s, _ in series}.values():
        reset(s)
    producers: dict[tuple[System, str], procs.Proc] = {}
    seconds: dict[tuple[System, str], float] = {}
    warmup: dict[tuple[System, str], int] = {}

    def drop(pair: tuple[System, str], exc: Exception) -> None:
        producers.pop(pair).stop()
        seconds.pop(pair, None)
        fail(*pair, exc)

    try:
        for s, cmd in series:
            argv, cwd = s.client_argv("serve_single", cmd)
            producers[(s, cmd)] = procs.Proc(
                argv,
                env=s.env(),
                cwd=cwd,
                pipes=True,
                log_path=ctx.tmp / f"{s.key}.log",
                name=f"{s.key} {cmd}",
            )
        for pair in list(producers):  # they start up side by side
            try:
                warmup[pair] = producers[pair].reply(SINGLE_READY_TIMEOUT_S)["warmup_jobs"]
                seconds[pair] = 0.0
            except Exception as exc:  # noqa: BLE001
                drop(pair, exc)
        for b, size in enumerate(min(block, n - start) for start in range(0, n, block)):
            order = list(producers)
            k = b % max(len(order), 1)
            for pair in order[k:] + order[:k]:
                try:
                    producers[pair].send(f"run {size}")
                    seconds[pair] += producers[pair].reply(SINGLE_BLOCK_TIMEOUT_S)["seconds"]
                except Exception as exc:  # noqa: BLE001
                    drop(pair, exc)
    finally:
        for p in producers.values():
            with contextlib.suppress(RuntimeError):
                p.send("quit")
        for p in producers.values():
            p.wait(10.0)
            p.stop()
    return {
        "series": {
            (s.key, cmd): {
                "n": n,
                "seconds": t,
                "rate": n / t,
                "block": block,
                "warmup_jobs": warmup[(s, cmd)],
            }
            for (s, cmd), t in seconds.items()
        }
    }


# --- per system -------------------------------------------------------------------------------


def run_system(ctx: Ctx, system: System, result: dict) -> None:
    cfg, reps = ctx.cfg, ctx.cfg["reps"]
    m = result["metrics"]

    def record(metric: str, fn) -> None:
        if metric not in system.metrics or metric not in ctx.metrics or metric in m:
            return  # not this system's, not asked for, or measured by enqueue_single_phase
        if ctx.deadline and time.monotonic() > ctx.deadline:
            result["errors"].append(f"{metric}: skipped, the run's time budget is spent")
            return
        t0 = time.monotonic()
        try:
            samples = fn()
            m[metric] = {"samples": samples}
            log(
                f"  {system.key:14s} {metric:22s} {summarize(metric, samples)}  "
                f"({time.monotonic() - t0:.1f}s)"
            )
        except Exception as exc:  # noqa: BLE001 - one broken metric must not end the run
            result["errors"].append(f"{metric}: {exc}")
            log(f"  {system.key:14s} {metric:22s} FAILED: {exc}")
            if ctx.args.verbose:
                traceback.print_exc()

    def enqueue(cmd: str, n: int):
        return [enqueue_sample(ctx, system, cmd, n) for _ in range(reps)]

    if ctx.args.wait_quiet:
        result["busy_before"] = wait_quiet(ctx.args.wait_quiet)
    else:
        result["busy_before"] = cpu_busy(0.5)
    if result["busy_before"] > 0.15:
        log(
            f"warning: the machine was {result['busy_before']:.0%} busy before {system.label}; "
            "expect noisy numbers"
        )
    # what is measured: taken after the wait (an editable install follows the work tree)
    result["settings"] = system.settings_note()
    result["versions"] = system.versions()
    log(f"{system.label}: schema")
    setup_schema(ctx, system)
    record("enqueue_single", lambda: enqueue("enqueue_single", cfg["enqueue_single_n"]))
    record("enqueue_single_plain", lambda: enqueue("enqueue_single_plain", cfg["enqueue_single_n"]))
    record("enqueue_single_sql", lambda: enqueue("enqueue_single_sql", cfg["enqueue_single_n"]))
    record("enqueue_bulk", lambda: enqueue("enqueue_bulk", cfg["enqueue_bulk_n"]))
    drains = {
        "drain_w1",
        "drain_w2",
        "drain_w1_nostats",
        "drain_w1_burststats",
        "drain_w1_finished",
    }
    n = drain_n(ctx, system, result) if ctx.metrics & drains & set(system.metrics) else 0
    result["drain_n"] = n
    reps2 = ctx.args.reps or 1  # secondary numbers: one repetition unless --reps asks for more

    # The database is fresh: no planner statistics yet.
    def drains(what: str, count: int, **kw):
        return [
            measured(ctx, f"{system.key} {what}", lambda: drain(ctx, system, n, **kw))
            for _ in range(count)
        ]

    # (drain_w1_nostats is measured once whatever happens: a repeat would have statistics)
    record(
        "drain_w1_nostats",
        lambda: [
            measured(
                ctx, f"{system.key} drain_w1_nostats", lambda: drain(ctx, system, n, 1), retry=False
            )
            for _ in range(reps2)
        ],
    )
    if n:
        # The table now holds finished jobs only: their statistics (kept across TRUNCATE) are
        # the steady state every following empty-table drain plans with.
        vacuum(system, analyze=True)
    record("drain_w1", lambda: drains("drain_w1", reps, workers=1))
    record("drain_w2", lambda: drains("drain_w2", reps, workers=2))
    record(
        "drain_w1_burststats", lambda: drains("drain_w1_burststats", reps2, workers=1, analyze=True)
    )
    record("pickup", lambda: pickup(ctx, system))

    # django-pgjobs' target "over 1M finished rows >= 0.9x the empty table": its empty-table
    # drains take turns with the finished-rows ones, on a twin database (drain_w1_alongside).
    alongside = system.key == "pgjobs" and "drain_w1_alongside" in ctx.metrics and n > 0

    def finished():
        twin = f"{system.db}_twin" if alongside else None
        live = False  # the twin is set up and none of its drains failed
        out, beside = [], []

        def on_twin(step) -> None:  # a failing twin leaves the finished-rows drains going
            nonlocal live
            try:
                step()
            except Exception as exc:  # noqa: BLE001
                live = False
                result["errors"].append(f"drain_w1_alongside: {exc}")
                log(f"  {system.key:14s} {'drain_w1_alongside':22s} FAILED: {exc}")

        def over_finished():
            s = measured(
                ctx,
                f"{system.key} drain_w1_finished",
                lambda: drain(ctx, system, n, 1, keep_rows=True),
            )
            s["finished_rows"] = cfg["finished_rows"]
            out.append(s)

        def beside_them():
            if live:
                with on_database(system, twin):
                    beside.append(
                        measured(
                            ctx,
                            f"{system.key} drain_w1_alongside",
                            lambda: drain(ctx, system, n, 1, keep_rows=True),
                        )
                    )

        try:
            if twin:
                live = True
                on_twin(lambda: setup_twin(ctx, system, twin, n))
            reset(system)
            t0 = time.monotonic()
            sql(system, system.finished_sql(cfg["finished_rows"]))
            vacuum(system, analyze=True)  # statistics of a table full of history
            if live:  # the twin's table has had one drain (setup_twin): the same history here
                drain(ctx, system, n, 1, keep_rows=True)
            result["finished_rows_setup_s"] = time.monotonic() - t0
            for rep in range(reps):  # F E, E F, F E, ...: each pair shares its minute
                turn = (over_finished, lambda: on_twin(beside_them))
                for step in turn if rep % 2 == 0 else turn[::-1]:
                    step()
            if live:
                m["drain_w1_alongside"] = {"samples": beside}
                log(
                    f"  {system.key:14s} {'drain_w1_alongside':22s} "
                    f"{summarize('drain_w1_alongside', beside)}"
                )
            return out
        finally:
            if twin:
                drop_db(ctx, twin)

    record("drain_w1_finished", finished)
    if system.key == "pgjobs":  # django-pgjobs' own target
        record("soak", lambda: soak(ctx, system))

    if ctx.args.profile and system.key == "pgjobs" and n:
        # after drain_w1_finished: planner statistics of a table of finished jobs
        import profile_summary

        try:
            s = drain(ctx, system, max(n, ctx.cfg["profile_n"]), 1, profile="drain")
            path = ctx.tmp / "pgjobs-profile-drain.txt"
            summary = profile_summary.summarize(str(path), top=30)
            out = ctx.tmp / "pgjobs-profile-drain-summary.txt"
            out.write_text(profile_summary.render(summary) + "\n")
            result["profiles"] = [
                {"tag": "drain", "file": str(path), "drain": s, "summary": summary}
            ]
            log(f"  profile: {s['rate']:,.0f} jobs/s under py-spy; summary in {out}")
        except Exception as exc:  # noqa: BLE001
            result["errors"].append(f"profile: {exc}")


def summarize(metric: str, samples: list[dict]) -> str:
    if metric == "pickup":
        return (
            "p50 "
            + ", ".join(f"{s['p50']:.2f}" for s in samples)
            + " ms; p99 "
            + ", ".join(f"{s['p99']:.2f}" for s in samples)
            + " ms"
        )
    if metric == "soak":
        return (
            "RSS after each round "
            + ", ".join(f"{mb:.0f}" for s in samples for mb in s["rss_mb_after_round"])
            + " MB"
        )
    rates = ", ".join(f"{s['rate']:,.0f}" for s in samples)
    extra = ""
    if metric.startswith("drain"):
        extra = f"  rss {max(s['rss_mb'] for s in samples):.0f} MB"
    return f"{rates} jobs/s{extra}"


# --- machine ----------------------------------------------------------------------------------


def machine_info(ctx: Ctx) -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    pg = {}
    with admin(ctx) as c:
        pg["version"] = c.execute("SHOW server_version").fetchone()[0]
        pg["version_full"] = c.execute("SELECT version()").fetchone()[0]
        for name in (
            "shared_buffers",
            "synchronous_commit",
            "fsync",
            "max_connections",
            "autovacuum",
            "wal_level",
            "work_mem",
            "max_wal_size",
            "jit",
        ):
            pg[name] = c.execute(f"SHOW {name}").fetchone()[0]
    node = shutil.which("node")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "mem_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": subprocess.run(
            [ctx.base_python, "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "node": subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
        if node
        else None,
        "postgres": pg,
        "loadavg_at_start": os.getloadavg(),
        "repo_commit": ctx.git_head,
    }


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/run.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="small counts, 1 repetition (default)")
    g.add_argument(
        "--full", action="store_true", help="20,000-job drains, 1M finished rows, 3 reps"
    )
    ap.add_argument("--only", help="comma-separated systems: " + ",".join(SYSTEMS))
    ap.add_argument("--metrics", help="comma-separated metrics (default: all)")
    ap.add_argument("--reps", type=int, help="repetitions per metric (medians and min/max)")
    ap.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/"),
        help="server to use (databases bench_* are created and dropped there)",
    )
    ap.add_argument(
        "--pgjobs-args",
        default=os.environ.get("BENCH_PGJOBS_ARGS", ""),
        help="extra runjobs flags for django-pgjobs, e.g. '--concurrency 8 --batch-size 100'",
    )
    ap.add_argument(
        "--pgjobs-src",
        default=os.environ.get("BENCH_PROJECT_DIR"),
        metavar="PATH",
        help="measure the django-pgjobs of another checkout (default: this repository)",
    )
    ap.add_argument(
        "--pgjobs-venv",
        metavar="NAME",
        help="environment bench/.venvs/NAME for django-pgjobs (default: pgjobs)",
    )
    ap.add_argument(
        "--pgjobs-db",
        metavar="NAME",
        help="database for django-pgjobs, bench_[a-z0-9_]+ (default: bench_pgjobs)",
    )
    ap.add_argument(
        "--drain-n",
        type=int,
        metavar="JOBS",
        help="jobs per drain, not sized down by the pilot drain (default: the mode's)",
    )
    ap.add_argument("--no-report", action="store_true", help="write latest.json only (no md/png)")
    ap.add_argument("--profile", action="store_true", help="py-spy a django-pgjobs drain_w1")
    ap.add_argument(
        "--keep-dbs", action="store_true", help="do not drop the bench_* databases at the end"
    )
    ap.add_argument(
        "--budget", type=float, help="stop starting new measurements after this many seconds"
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="before each system, wait up to this long for other CPU load to stop",
    )
    ap.add_argument(
        "--foreign-limit",
        type=float,
        default=0.2,
        metavar="CORES",
        help="repeat a sample when other processes used more CPU than this meanwhile",
    )
    ap.add_argument(
        "--retries",
        type=int,
        default=2,
        help="how often a sample taken under foreign load is repeated (default 2)",
    )
    ap.add_argument(
        "--single-block",
        type=int,
        default=100,
        metavar="JOBS",
        help="single enqueues: jobs per block, the series taking turns block by block "
        "(default 100); 0: the series take turns sample by sample, a process each",
    )
    ap.add_argument("--out", default=str(RESULTS), help="directory for latest.json/md/png")
    ap.add_argument(
        "--report-only", action="store_true", help="re-render latest.md/png from latest.json"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument(
        "--producers",
        action="store_true",
        help="only the workload of many concurrent producers (bench/producers.py)",
    )
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.producers:
        import producers

        return producers.run(args)
    out_dir = Path(args.out)
    if args.report_only:
        import report

        report.render(out_dir / "latest.json", out_dir)
        return 0
    ctx = Ctx(args)
    if args.budget is None:
        ctx.deadline = None
    keys = list(SYSTEMS)
    if args.only:
        keys = []
        for k in args.only.split(","):
            k = ALIASES.get(k.strip(), k.strip())
            if k not in SYSTEMS:
                raise SystemExit(f"unknown system {k!r}; choose from {', '.join(SYSTEMS)}")
            keys.append(k)
    from systems import ALL_METRICS

    if args.metrics:
        ctx.metrics = set(args.metrics.split(","))
    else:  # quick leaves out the secondary series, to stay near 2 minutes on a slow machine
        ctx.metrics = set(ALL_METRICS) | {"enqueue_single_plain", "enqueue_single_sql"}
        if ctx.mode == "quick":
            ctx.metrics -= QUICK_SKIPS

    def on_signal(signum, frame):
        log(f"signal {signum}: stopping every child process")
        procs.kill_all()
        sys.exit(130)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    t_setup = time.monotonic()
    systems: list[System] = []
    for k in keys:
        s = SYSTEMS[k](ctx)
        try:
            s.build()
        except Exception as exc:  # noqa: BLE001
            s.skip_reason = f"environment build failed: {exc}"
        if s.skip_reason:
            log(f"skipping {s.label}: {s.skip_reason}")
        systems.append(s)
    setup_s = time.monotonic() - t_setup
    log(
        f"environments ready in {setup_s:.0f}s; mode={ctx.mode} reps={ctx.cfg['reps']}; logs in {ctx.tmp}"
    )

    results = {
        "schema": 1,
        "mode": ctx.mode,
        "config": ctx.cfg,
        "command": "python3 bench/run.py " + " ".join(argv),
        "machine": machine_info(ctx),
        "environment_setup_s": setup_s,
        "systems": {},
    }
    t_run = time.monotonic()
    if ctx.cfg.get("total_budget_s") and ctx.deadline is None:
        ctx.deadline = time.monotonic() + ctx.cfg["total_budget_s"] * 1.5
    try:
        enqueue_single_phase(ctx, systems, results)
    finally:
        procs.kill_all()
    for s in systems:
        early = results["systems"].get(s.key, {})
        r = {
            "label": s.label,
            "metrics": early.get("metrics", {}),
            "errors": early.get("phase_errors", []),
            "skipped": s.skip_reason,
            "settings": "",
            "versions": {},
        }
        results["systems"][s.key] = r
        if s.skip_reason:
            continue
        t0 = time.monotonic()
        try:
            run_system(ctx, s, r)
        except Exception as exc:  # noqa: BLE001
            r["errors"].append(f"setup: {exc}")
            log(f"{s.label} failed: {exc}")
            if args.verbose:
                traceback.print_exc()
        finally:
            procs.kill_all()
            if not args.keep_dbs:
                try:
                    drop_db(ctx, s.db)
                except psycopg.Error as exc:
                    log(f"could not drop {s.db}: {exc}")
        r["elapsed_s"] = time.monotonic() - t0
        if r.get("versions") and s.versions() != r["versions"]:
            r["errors"].append(
                f"the code changed while it was measured: {r['versions']} -> {s.versions()}"
            )
    results["run_s"] = time.monotonic() - t_run
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(results, indent=1) + "\n")
    log(f"measurements took {results['run_s']:.0f}s; writing {out_dir}/latest.*")
    if args.no_report:
        return 0
    import report

    report.render(out_dir / "latest.json", out_dir)
    print((out_dir / "latest.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
