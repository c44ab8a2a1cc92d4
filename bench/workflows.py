"""Workflows side by side with plain jobs, on one database, in one run:

    DATABASE_URL=postgres://root@127.0.0.1:5432/pgjobs_bench_wf PYTHONPATH=$PWD \\
        .venv/bin/python bench/workflows.py [--n 10000] [--rounds 5] [--workers 4]

1. finalize of plain jobs (batches of 50): the statement the finalize chooses for a batch
   without dependants, and the one with the fan-in CTEs (a batch with some), vs the statement
   before workflows (rebuilt here from the same text, without them): a plain job must not pay
   for workflows;
2. enqueue of an N-member group + callback (Workflow) vs enqueue_many of N;
3. drain of an N-member group + callback by ``--workers`` real ``runjobs --burst`` vs a plain
   drain of N, and the callback's start after the last member's finish;
4. with ``--before`` (a checkout, e.g. of main): the enqueue phase and a plain drain of N by
   that checkout's workers and this one's, rounds alternated.

Series alternate round by round (drift falls on both); medians, min-max and ratios go to
stdout and bench/results/workflows.json. The database is created and migrated if missing, and
its jobs deleted between phases. Uses tests.settings (the noop handler test.noop).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(os.environ.get("PGJOBS_BENCH_SRC", ROOT))  # the django_pgjobs measured (--before)
sys.path.insert(0, str(SRC))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def setup() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def wipe() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("TRUNCATE pgjobs_job, pgjobs_dependency, pgjobs_workflow")


def plain_finalize_sql() -> str:
    """The finalize as it was before workflows: its fenced UPDATE alone."""
    from django_pgjobs import queries

    head = queries._FINALIZE.split("), ended AS")[0]
    return head.replace("), fin AS (\nUPDATE", ")\nUPDATE").replace(
        "RETURNING j.id, j.status, j.step, j.has_dependants", "RETURNING j.id"
    )


def finalize_round(statements: dict[str, str], n: int, generic: bool) -> dict[str, list[float]]:
    """ms per job of each statement, batch by batch in turn on the same table (50 jobs a
    batch): run as the worker runs them, prepared, and either planned once (``generic``: the
    worker's plan_cache_mode on a table of 10,000 rows or more) or planned at each execution
    (custom plans: smaller tables, and any unprepared connection)."""
    from django.db import connection

    from django_pgjobs import db, enqueue_many, queries
    from django_pgjobs.queries import Completion

    wipe()
    enqueue_many("test.noop", [{}] * n)
    with connection.cursor() as cur:
        mode = "force_generic_plan" if generic else "force_custom_plan"
        cur.execute(f"SET plan_cache_mode = {mode}")
    times: dict[str, list[float]] = {name: [] for name in statements}
    turns = list(statements.items())
    cur = db.prepared_cursor(None)
    k = 0
    while rows := queries.claim(
        worker_id="b", types=["test.noop"], queues=None, limit=50, lease_seconds=60
    ):
        name, statement = turns[k % len(turns)]
        k += 1
        done = [Completion(r.id, r.lease_token, r.attempts, "COMPLETED") for r in rows]
        params = queries._finalize_params(done)
        start = time.perf_counter()
        cur.execute(statement, params)
        cur.fetchall()
        times[name].append((time.perf_counter() - start) * 1e3 / len(rows))
    return times


def enqueue_group(n: int) -> float:
    from django_pgjobs import Workflow

    wipe()
    wf = Workflow("bench")
    members = wf.group("m", "test.noop", [{"i": i} for i in range(n)])
    wf.add("cb", "test.noop", after=members)
    start = time.perf_counter()
    wf.enqueue()
    return time.perf_counter() - start


def enqueue_plain(n: int) -> float:
    from django_pgjobs import enqueue_many

    wipe()
    start = time.perf_counter()
    enqueue_many("test.noop", [{"i": i} for i in range(n)])
    return time.perf_counter() - start


def drain(workers: int, src: Path = ROOT) -> float:
    """Seconds for ``workers`` ``runjobs --burst`` of the checkout ``src`` to drain the queue."""
    from django.db import connection

    env = {**os.environ, "PGJOBS_TEST_DB_NAME": connection.settings_dict["NAME"]}
    env.pop("PYTHONPATH", None)  # the django_pgjobs of ``src`` (its cwd)
    args = [sys.executable, "-m", "django", "runjobs", "--burst", "--concurrency", "4", "-v", "0"]
    start = time.perf_counter()
    procs = [subprocess.Popen(args, cwd=src, env=env) for _ in range(workers)]  # noqa: S603
    for p in procs:
        p.wait()
    elapsed = time.perf_counter() - start
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pgjobs_job WHERE status <> 'COMPLETED'")
        left = cur.fetchone()[0]
    if left:  # a burst worker that left before the callback became due: finish it, timed
        subprocess.run([*args[:3], "runjobs", "--burst", "-v", "0"], cwd=src, env=env, check=True)
        elapsed = time.perf_counter() - start
    return elapsed


def callback_lag() -> float:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT extract(epoch FROM (SELECT started_at FROM pgjobs_job WHERE step = 'cb') "
            "- (SELECT max(finished_at) FROM pgjobs_job WHERE step = 'm'))"
        )
        return float(cur.fetchone()[0]) * 1e3


def summary(name: str, values: list[float], unit: str) -> dict:
    med = statistics.median(values)
    print(f"{name:44} {med:10.3f} {unit} (min {min(values):.3f}, max {max(values):.3f})")
    return {"median": med, "min": min(values), "max": max(values), "unit": unit, "n": len(values)}


def enqueue_pair(n: int, reps: int = 1) -> dict[str, float]:
    """The enqueue phase in this process's django_pgjobs (SRC): medians of ``reps`` pairs,
    after one untimed pair when ``reps`` > 1 (a fresh process's first statements)."""
    if reps > 1:
        enqueue_group(n), enqueue_plain(n)
    pairs = [(enqueue_group(n), enqueue_plain(n)) for _ in range(reps)]
    return {
        "enqueue group + callback": statistics.median(p[0] for p in pairs),
        "enqueue_many": statistics.median(p[1] for p in pairs),
    }


def enqueue_ab(before: str, n: int, rounds: int) -> dict[str, list[float]]:
    """The enqueue phase of ``before`` (a checkout) and of this one, each round a subprocess
    of each, alternated (A B, B A, ...): the ratio group/enqueue_many of each side."""
    found: dict[str, list[float]] = {}
    sides = [("before", before), ("after", str(ROOT))]
    for k in range(rounds):
        for side, src in sides if k % 2 == 0 else sides[::-1]:
            env = {**os.environ, "PGJOBS_BENCH_SRC": src}
            args = [sys.executable, __file__, "--phase", "enqueue", "--n", str(n)]
            out = subprocess.run(args, env=env, check=True, capture_output=True, text=True)  # noqa: S603
            pair = json.loads(out.stdout.strip().splitlines()[-1])
            for name, value in pair.items():
                found.setdefault(f"{name} ({side})", []).append(value)
            found.setdefault(f"group throughput / enqueue_many ({side})", []).append(
                pair["enqueue_many"] / pair["enqueue group + callback"]
            )
    return found


def drain_ab(before: str, n: int, workers: int, rounds: int) -> dict[str, list[float]]:
    """Plain drains of ``n`` jobs by the workers of ``before`` (a checkout) and of this one,
    alternated round by round (A B, B A, ...); the schema is this checkout's (same migrations)."""
    found: dict[str, list[float]] = {}
    sides = [("before", Path(before)), ("after", ROOT)]
    for k in range(rounds):
        for side, src in sides if k % 2 == 0 else sides[::-1]:
            enqueue_plain(n)
            found.setdefault(f"drain plain ({side})", []).append(drain(workers, src))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--before", help="a checkout (e.g. of main): its enqueue, A/B")
    parser.add_argument("--phase", choices=["all", "enqueue"], default="all")
    opts = parser.parse_args()
    setup()
    if opts.phase == "enqueue":  # one round, for enqueue_ab's subprocesses
        print(json.dumps(enqueue_pair(opts.n, reps=3)))
        return
    from django_pgjobs import queries

    out: dict[str, dict] = {}
    fin: dict[str, list[float]] = {}
    enq: dict[str, list[float]] = {"enqueue group + callback": [], "enqueue_many": []}
    drains: dict[str, list[float]] = {"drain group + callback": [], "drain plain": []}
    lags: list[float] = []
    plain = [queries.Completion(0, "", 0, "COMPLETED", fan_in=False)]
    statements = {
        "chosen for plain jobs": queries.finalize_sql(plain),
        "with fan-in": queries.finalize_sql(),
        "before": plain_finalize_sql(),
    }
    for _ in range(opts.rounds):
        for generic, plans in ((True, "generic plan"), (False, "custom plans")):
            for name, values in finalize_round(statements, opts.n, generic).items():
                fin.setdefault(f"finalize {name}, {plans}", []).extend(values)
        for name, value in enqueue_pair(opts.n).items():
            enq[name].append(value)
        enqueue_group(opts.n)
        drains["drain group + callback"].append(drain(opts.workers))
        lags.append(callback_lag())
        enqueue_plain(opts.n + 1)
        drains["drain plain"].append(drain(opts.workers))
    for name, values in fin.items():
        out[name] = summary(name, values, "ms/job")
    for name, values in {**enq, **drains}.items():
        out[name] = summary(name, values, "s")
    out["callback start after last member finished"] = summary("callback lag", lags, "ms")
    ab = enqueue_ab(opts.before, opts.n, opts.rounds) if opts.before else {}
    if opts.before:
        ab.update(drain_ab(opts.before, opts.n, opts.workers, opts.rounds))
    for name, values in ab.items():
        out[name] = summary(name, values, "x" if "/" in name else "s")
    fin_ratio = {
        f"finalize {name} / before, {plans}{target}": out[f"finalize {name}, {plans}"]["median"]
        / out[f"finalize before, {plans}"]["median"]
        for name, target in (("chosen for plain jobs", " (<= 1.03)"), ("with fan-in", ""))
        for plans in ("generic plan", "custom plans")
    }
    ratios = {
        **fin_ratio,
        "group enqueue throughput / enqueue_many (>= 0.8)": out["enqueue_many"]["median"]
        / out["enqueue group + callback"]["median"],
        "group drain throughput / plain drain (>= 0.7)": out["drain plain"]["median"]
        / out["drain group + callback"]["median"],
    }
    if ab:  # the same ratio, measured in the two checkouts' subprocesses
        ratios["group enqueue / enqueue_many, this checkout over --before"] = (
            out["group throughput / enqueue_many (after)"]["median"]
            / out["group throughput / enqueue_many (before)"]["median"]
        )
        ratios["plain drain throughput, this checkout over --before (>= 0.97)"] = (
            out["drain plain (before)"]["median"] / out["drain plain (after)"]["median"]
        )
    for name, value in ratios.items():
        print(f"{name:54} {value:.3f}")
    load = os.getloadavg()
    print(f"load average {load}")
    result = {"args": vars(opts), "series": out, "ratios": ratios, "loadavg": load}
    path = ROOT / "bench" / "results" / "workflows.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(result))
    print(f"written {path} and .md")


def markdown(result: dict) -> str:
    """bench/results/workflows.md: the medians and ratios of workflows.json, as tables."""
    load = ", ".join(f"{x:.1f}" for x in result["loadavg"])
    lines = [
        "# bench/workflows.py",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, args {result['args']}, load "
        f"average at the end {load} (2 cores, shared: loaded). Raw: workflows.json.",
        "",
        "| series | median | min | max | unit | n |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in result["series"].items():
        lines.append(
            f"| {name} | {v['median']:.4g} | {v['min']:.4g} | {v['max']:.4g} | {v['unit']} "
            f"| {v['n']} |"
        )
    lines += ["", "| ratio (target) | value |", "|---|---|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in result["ratios"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
