"""What enqueue_on_commit costs next to enqueue(), per business transaction.

    DATABASE_URL=postgres://USER@127.0.0.1:5432/DB .venv/bin/python bench/enqueue_on_commit.py

Each business transaction (on "default") inserts one row (a table bench_order it creates) and then:

    enqueue     enqueue() inside it, the queue on "default" (one database, one commit)
    on_commit   enqueue_on_commit(..., key, using="default"), the queue on a "queue" alias (a
                second connection to the same database): after the commit, an advisory lock
                on the key, a lookup of the key, the insert, a second commit

N transactions per round (env N, default 2,000), R rounds interleaved (env R, default 5);
prints the median wall time per transaction and writes bench/results/enqueue_on_commit.md.
The database must hold django-pgjobs' tables (manage.py migrate of bench/pgjobs_bench); its
jobs table is truncated.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "pgjobs_bench"), str(HERE / "drivers")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")

import django  # noqa: E402
from django.conf import settings  # noqa: E402

settings.DATABASES["queue"] = {**settings.DATABASES["default"]}  # a second connection
django.setup()

from django.db import connections, transaction  # noqa: E402

from django_pgjobs import conf, enqueue, enqueue_on_commit  # noqa: E402

N, R = int(os.environ.get("N", 2_000)), int(os.environ.get("R", 5))


def one_round(variant: str, offset: int) -> float:
    conf.get_settings()["DATABASE"] = "default" if variant == "enqueue" else "queue"
    with connections["default"].cursor() as c:
        c.execute("CREATE TABLE IF NOT EXISTS bench_order (id bigint PRIMARY KEY)")
        c.execute("TRUNCATE pgjobs_job, bench_order")
    started = time.perf_counter()
    for i in range(offset, offset + N):
        with transaction.atomic(using="default"):
            with connections["default"].cursor() as c:
                c.execute("INSERT INTO bench_order VALUES (%s)", [i])
            if variant == "enqueue":
                enqueue("noop", {"i": i})
            else:
                enqueue_on_commit("noop", {"i": i}, key=f"order:{i}", using="default")
    return (time.perf_counter() - started) / N * 1e6


def main() -> None:
    times: dict[str, list[float]] = {"enqueue": [], "on_commit": []}
    for r in range(R):
        for variant in times:
            times[variant].append(one_round(variant, r * N))
    med = {v: statistics.median(t) for v, t in times.items()}
    with connections["default"].cursor() as c:
        c.execute("SHOW fsync")
        fsync = c.fetchone()[0]
    lines = [
        "# enqueue_on_commit vs enqueue, per business transaction",
        "",
        f"`bench/enqueue_on_commit.py`, N={N} transactions x R={R} rounds, medians "
        "(one client, same machine as the server, loopback; load average "
        f"{os.getloadavg()[0]:.1f} at the end; fsync {fsync}: with it on, the second commit "
        "adds a WAL flush).",
        "",
        "| variant | µs per transaction | ratio |",
        "|---|---|---|",
        *(f"| {v} | {m:.0f} | {m / med['enqueue']:.2f}x |" for v, m in med.items()),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "enqueue_on_commit.md").write_text(text)


if __name__ == "__main__":
    main()
