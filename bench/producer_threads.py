"""enqueue() from threads of a few processes against raw psycopg into a copy of the table
(issue 26 §5's thread arrangements), with the environment it is started in (no venvs: for an
A/B of two checkouts, run it with PYTHONPATH on each in turn).

    DATABASE_URL=postgres://USER@127.0.0.1:5432/DB PYTHONPATH=CHECKOUT python \\
        bench/producer_threads.py [--arrangements 4x4,8x8] [--seconds 3] [--rounds 3]

Series, each round in turn (the order rotates): `enqueue` (django_pgjobs.enqueue, autocommit,
one job per transaction, no worker) and `copy` (drivers/pgjobs_client.copy_enqueue_one: the
same row from raw psycopg into pgjobs_job_copy, LIKE pgjobs_job INCLUDING ALL, no NOTIFY).
Every thread has its own connection; all start at the same instant. Prints one JSON line per
arrangement: jobs/s per round and series, the per-round ratios enqueue/copy and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(series: str, threads: int, seconds: float) -> None:
    """One producer process: ``threads`` threads of ``series``, warmed up, then from the start
    time the parent sends (once every process is ready) for ``seconds``."""
    sys.path[:0] = [str(HERE / "drivers")]
    import pgjobs_client
    from django.db import connections

    counts = [0] * threads
    ready = threading.Barrier(threads + 1)
    go: list[float] = []

    def run(k: int) -> None:
        one = pgjobs_client.enqueue_one if series == "enqueue" else pgjobs_client.copy_enqueue_one()
        for i in range(20):  # warm-up: connection, prepared statement
            one(-1 - i)
        ready.wait()
        ready.wait()  # the start time is in go
        start = go[0]
        time.sleep(max(0.0, start - time.time()))
        stop, n = start + seconds, 0
        while time.time() < stop:
            one(k * 10_000_000 + n)
            n += 1
        counts[k] = n
        connections.close_all()

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    ready.wait()
    print("ready", flush=True)
    go.append(float(sys.stdin.readline()))
    ready.wait()
    for w in workers:
        w.join()
    print(sum(counts))


def sample(series: str, processes: int, threads: int, seconds: float) -> float:
    argv = [sys.executable, __file__, "--child", series, str(threads), str(seconds)]
    procs = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    for p in procs:  # every thread warmed up
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"  # noqa: S101
    start = f"{time.time() + 0.2}\n"
    for p in procs:
        assert p.stdin is not None  # noqa: S101
        p.stdin.write(start)
        p.stdin.flush()
    jobs = sum(int(p.communicate()[0].split()[-1]) for p in procs)
    return jobs / seconds


def prepare_tables() -> None:
    sys.path[:0] = [str(HERE / "drivers")]
    import pgjobs_client  # noqa: F401 - django.setup()
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "DROP TABLE IF EXISTS pgjobs_job_copy; "
            "CREATE TABLE pgjobs_job_copy (LIKE pgjobs_job INCLUDING ALL)"
        )
        cur.execute("TRUNCATE pgjobs_job")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        series, threads, seconds = sys.argv[2:5]
        child(series, int(threads), float(seconds))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arrangements", default="4x4,8x8", help="PROCESSESxTHREADS, comma-separated")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    prepare_tables()
    order = ["enqueue", "copy"]
    for arrangement in args.arrangements.split(","):
        p, t = (int(x) for x in arrangement.split("x"))
        rates: dict[str, list[float]] = {s: [] for s in order}
        for r in range(args.rounds):
            for s in order[r % 2 :] + order[: r % 2]:
                rates[s].append(sample(s, p, t, args.seconds))
        ratios = [e / c for e, c in zip(rates["enqueue"], rates["copy"], strict=True)]
        print(
            json.dumps(
                {
                    "arrangement": f"threads {p}x{t}",
                    "package": os.path.dirname(__import__("django_pgjobs").__file__),
                    "rates": rates,
                    "ratios": [round(x, 3) for x in ratios],
                    "median_ratio": round(statistics.median(ratios), 3),
                    "loadavg": Path("/proc/loadavg").read_text().split()[:3],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
