"""The async runtime (docs/async.md) on an I/O-bound workload, and what it costs the sync one.

    python bench/async_io.py [--jobs 20000] [--concurrency 50,200,500] [--runs 3]
                             [--baseline 109ad15] [--pg-url postgresql://root@127.0.0.1:5432/]

For each concurrency C: N jobs each awaiting 50 ms (``asyncio.sleep``) drained by ONE
``runjobs --burst --async-concurrency C``; the rate is N over the span from the first start to
the last finish (database clock), beside the ideal C / 50 ms; the worker's peak RSS.
Then: the sync no-op drain (``--concurrency 10``) of this tree beside the ``--baseline`` commit
(a ``git archive`` of it: the thread runtime before the async one), and the idle pickup
(enqueue -> started_at, database clock) of an async job beside a sync one.
Medians of ``--runs``; results in bench/results/async_io.{json,md}.

    python bench/async_io.py --peers pgqueuer,pgboss,oban [--jobs 5000] [--concurrency 50,200]

Side by side instead (only this part runs; the others stay as last measured): django-pgjobs
and each peer drain the same jobs (awaiting 50 ms, C in flight) with one worker, the systems
taking turns in an order that rotates every round (benchlib/aio_peers.py says how each peer
is set up and timed); jobs/s, x ideal, x the fastest peer and the load average.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import cli  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
DB = "bench_async_io"
SLEEP_MS = 50


def main() -> None:
    global DB  # noqa: PLW0603 - the one database of the runs below, named by --db-prefix
    ap = cli.parser(__doc__)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--noop-jobs", type=int, default=20000)
    ap.add_argument("--concurrency", default="50,200,500")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default="109ad15")
    ap.add_argument("--pickups", type=int, default=20)
    ap.add_argument("--label", default="")
    ap.add_argument("--peers", default="", help="e.g. pgqueuer,pgboss,oban: the side-by-side")
    ap.add_argument("--db-prefix", default=DB, help="the databases' names start with this")
    a = ap.parse_args()
    url = a.pg_url.rstrip("/") + "/"
    DB = a.db_prefix
    if a.peers:
        side_by_side(a)
        return
    _recreate(url)
    base = _baseline_tree(a.baseline)
    out: dict = {"jobs": a.jobs, "sleep_ms": SLEEP_MS, "runs": a.runs, "label": a.label}
    rows = []
    for c in [int(x) for x in a.concurrency.split(",")]:
        rates, rss = [], []
        for _ in range(a.runs):
            rate, peak = drain(url, "asleep", a.jobs, ["--async-concurrency", str(c)])
            rates.append(rate)
            rss.append(peak)
        ideal = c / (SLEEP_MS / 1000)
        rate = statistics.median(rates)
        rows.append(
            {
                "concurrency": c,
                "jobs_per_s": round(rate),
                "ideal": round(ideal),
                "of_ideal": round(rate / ideal, 2),
                "rss_mb": round(max(rss) / 1024, 1),
                "runs": [round(r) for r in rates],
            }
        )
        print(rows[-1], flush=True)
    out["async"] = rows
    now = [drain(url, "noop", a.noop_jobs, ["--concurrency", "10"])[0] for _ in range(a.runs)]
    then = [
        drain(url, "noop", a.noop_jobs, ["--concurrency", "10"], tree=base)[0]
        for _ in range(a.runs)
    ]
    out["sync_noop"] = {
        "this": round(statistics.median(now)),
        "baseline": round(statistics.median(then)),
        "ratio": round(statistics.median(now) / statistics.median(then), 3),
        "baseline_commit": a.baseline,
    }
    print(out["sync_noop"], flush=True)
    out["pickup_ms"] = {k: pickup(url, k, a.pickups) for k in ("noop", "asleep")}
    print(out["pickup_ms"], flush=True)
    _write(out)


def side_by_side(a) -> None:
    """django-pgjobs and the peers, in turns, at each concurrency: results["peers"]."""
    from benchlib import aio_peers

    ctx = aio_peers.Ctx(a.pg_url)
    keys = ["pgjobs", *[k for k in a.peers.split(",") if k != "pgjobs"]]
    unknown = set(keys) - set(aio_peers.AIO_SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown peer(s) {sorted(unknown)}; known: {aio_peers.PEERS}")
    systems = {k: aio_peers.AIO_SYSTEMS[k](ctx, a.db_prefix) for k in keys}
    skipped = {k: why for k, s in systems.items() if (why := s.setup())}
    live = [k for k in keys if k not in skipped]
    levels = [int(x) for x in a.concurrency.split(",")]
    (RESULTS / "tmp").mkdir(parents=True, exist_ok=True)
    samples: dict[tuple[str, int], list[dict]] = {(k, c): [] for k in live for c in levels}
    try:
        for r in range(a.runs):
            for c in levels:
                for k in live[r % len(live) :] + live[: r % len(live)]:
                    log = RESULTS / "tmp" / f"async_io_{k}_{c}.log"
                    got = aio_peers.drain(systems[k], a.jobs, c, log)
                    samples[(k, c)].append(got)
                    print(k, c, {**got, "rate": round(got["rate"])}, flush=True)
    finally:
        for s in systems.values():
            aio_peers.drop_db(ctx, s.system.db)
    peers = _peer_rows(samples, live, levels)
    peers.update(
        jobs=a.jobs,
        runs=a.runs,
        skipped=skipped,
        versions={k: systems[k].version() for k in live},
        notes={k: systems[k].note(max(levels)) for k in live},
        label=a.label,
    )
    out = json.loads((RESULTS / "async_io.json").read_text()) if _has_results() else {}
    out["peers"] = peers
    _write(out)


def _peer_rows(samples: dict, live: list[str], levels: list[int]) -> dict:
    rows = []
    for c in levels:
        med = {k: statistics.median(s["rate"] for s in samples[(k, c)]) for k in live}
        fastest = max((med[k] for k in live if k != "pgjobs"), default=0.0)
        ideal = c / (SLEEP_MS / 1000)
        for k in live:
            rows.append(
                {
                    "system": k,
                    "concurrency": c,
                    "jobs_per_s": round(med[k]),
                    "of_ideal": round(med[k] / ideal, 2),
                    "of_fastest_peer": round(med[k] / fastest, 2) if fastest else None,
                    "per_round_of_fastest_peer": _per_round(samples, k, c, live),
                    "runs": [round(s["rate"]) for s in samples[(k, c)]],
                    "load1": [s["load1"] for s in samples[(k, c)]],
                    "rss_mb": round(max(s["rss_kb"] for s in samples[(k, c)]) / 1024, 1),
                }
            )
    return {"rows": rows}


def _per_round(samples: dict, key: str, c: int, live: list[str]) -> list[float]:
    """The system's rate over the fastest peer's of the same round (the same stretch of the
    machine's load), round by round."""
    peers = [k for k in live if k not in ("pgjobs", key)] if key == "pgjobs" else []
    if not peers:
        return []
    rounds = range(len(samples[(key, c)]))
    best = [max(samples[(p, c)][r]["rate"] for p in peers) for r in rounds]
    return [round(samples[(key, c)][r]["rate"] / best[r], 2) for r in rounds]


def _has_results() -> bool:
    return (RESULTS / "async_io.json").exists()


def _env(url: str, tree: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = url + DB
    paths = [str(tree or ROOT), str(BENCH / "pgjobs_bench"), str(BENCH / "drivers")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["DJANGO_SETTINGS_MODULE"] = "bench_settings"
    return env


def _recreate(url: str) -> None:
    with psycopg.connect(url + "postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "migrate", "-v", "0"], env=_env(url), check=True
    )


def _baseline_tree(commit: str) -> Path:
    where = Path(tempfile.mkdtemp(prefix="pgjobs-baseline-"))
    archive = subprocess.run(  # noqa: S603
        ["git", "-C", str(ROOT), "archive", commit, "django_pgjobs"],  # noqa: S607
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    return where


def _enqueue(url: str, job_type: str, n: int, ms: int) -> None:
    with psycopg.connect(url + DB, autocommit=True) as conn:
        conn.execute("TRUNCATE pgjobs_job")
        conn.execute(
            "INSERT INTO pgjobs_job (type, config) "
            "SELECT %s, jsonb_build_object('ms', %s::int, 'i', i) FROM generate_series(1, %s) i",
            [job_type, ms, n],
        )
        conn.execute("VACUUM ANALYZE pgjobs_job")


def drain(
    url: str, job_type: str, n: int, flags: list[str], tree: Path | None = None
) -> tuple[float, int]:
    """Jobs per second of one burst worker draining n jobs, and its peak RSS (kB)."""
    _enqueue(url, job_type, n, SLEEP_MS)
    cmd = [sys.executable, "-m", "django", "runjobs", "--burst", "-v", "0", *flags]
    proc = subprocess.Popen(cmd, env=_env(url, tree), stdout=subprocess.DEVNULL)  # noqa: S603
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _rss_kb(proc.pid))
        time.sleep(0.05)
    with psycopg.connect(url + DB) as conn:
        left, span = conn.execute(
            "SELECT count(*) FILTER (WHERE status <> 'COMPLETED'), "
            "extract(epoch FROM max(finished_at) - min(started_at)) FROM pgjobs_job"
        ).fetchone()
    assert not left, f"{left} jobs not completed"
    return n / float(span), peak


def pickup(url: str, job_type: str, samples: int) -> float:
    """p50 ms from an enqueue's commit (created_at) to started_at, idle long-lived worker."""
    with psycopg.connect(url + DB, autocommit=True) as conn:
        conn.execute("TRUNCATE pgjobs_job")
    cmd = [sys.executable, "-m", "django", "runjobs", "-v", "0"]
    proc = subprocess.Popen(cmd, env=_env(url), stdout=subprocess.DEVNULL)  # noqa: S603
    got = []
    try:
        time.sleep(3)  # started and idle
        sys.path.insert(0, str(ROOT))
        with psycopg.connect(url + DB, autocommit=True) as conn:
            for _ in range(samples):
                (job_id,) = conn.execute(
                    "INSERT INTO pgjobs_job (type, config) VALUES (%s, '{\"ms\": 0}') RETURNING id",
                    [job_type],
                ).fetchone()
                conn.execute("NOTIFY pgjobs, 'default'")
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    row = conn.execute(
                        "SELECT extract(epoch FROM started_at - created_at) FROM pgjobs_job "
                        "WHERE id = %s AND started_at IS NOT NULL",
                        [job_id],
                    ).fetchone()
                    if row:
                        got.append(float(row[0]) * 1000)
                        break
                    time.sleep(0.005)
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)
    return round(statistics.median(got), 1) if got else float("nan")


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _write(out: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "async_io.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = _own_lines(out) if "async" in out else []
    lines += _peer_lines(out["peers"]) if "peers" in out else []
    (RESULTS / "async_io.md").write_text("\n".join(lines))


def _own_lines(out: dict) -> list[str]:
    return [
        f"# Async runtime, I/O-bound drain ({out['jobs']:,} jobs x {out['sleep_ms']} ms, "
        f"one worker, median of {out['runs']}) {out['label']}",
        "",
        "| async concurrency | jobs/s | ideal | x ideal | peak RSS MB | runs |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['concurrency']} | {r['jobs_per_s']:,} | {r['ideal']:,} | {r['of_ideal']} "
            f"| {r['rss_mb']} | {r['runs']} |"
            for r in out["async"]
        ),
        "",
        f"Sync no-op drain (--concurrency 10): {out['sync_noop']['this']:,} jobs/s, baseline "
        f"{out['sync_noop']['baseline_commit']} {out['sync_noop']['baseline']:,} jobs/s: "
        f"{out['sync_noop']['ratio']}x",
        "",
        f"Idle pickup p50 (enqueue -> started, ms): sync {out['pickup_ms']['noop']}, "
        f"async {out['pickup_ms']['asleep']}",
        "",
    ]


def _peer_lines(peers: dict) -> list[str]:
    """The side-by-side table (``--peers``), with each system's settings and versions."""
    lines = [
        f"# Side by side: {peers['jobs']:,} jobs x {SLEEP_MS} ms, one worker, median of "
        f"{peers['runs']} rounds, systems in turns {peers['label']}",
        "",
        "Rate: jobs over first handler start -> no unfinished job in the database. Load: the "
        "1-minute load average at the start of each sample (2 cores, shared machine: loaded).",
        "",
        "x fastest peer: the medians' ratio; per round: django-pgjobs over the fastest peer of "
        "the same round (the same stretch of load), median and each round.",
        "",
        "| system | in flight | jobs/s | x ideal | x fastest peer | per round | runs | load avg "
        "| peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in peers["rows"]:
        rounds = r.get("per_round_of_fastest_peer") or []
        per = f"{statistics.median(rounds):.2f} {rounds}" if rounds else ""
        lines.append(
            f"| {r['system']} | {r['concurrency']} | {r['jobs_per_s']:,} | {r['of_ideal']} "
            f"| {r['of_fastest_peer']} | {per} | {r['runs']} | {r['load1']} | {r['rss_mb']} |"
        )
    lines += ["", *(f"- {k}: {v}; {peers['versions'].get(k)}" for k, v in peers["notes"].items())]
    lines += [f"- {k}: skipped, {why}" for k, why in peers["skipped"].items()]
    return [*lines, ""]


if __name__ == "__main__":
    main()
