"""enqueue()'s client CPU per call against the same INSERT sent from raw psycopg.

    DATABASE_URL=postgres://USER@127.0.0.1:5432/DB .venv/bin/python bench/enqueue_cpu.py

Three series, one job per transaction (autocommit), interleaved round by round (env R rounds,
default 5, of N calls each, default 3,000): ``enqueue`` (django_pgjobs.enqueue(), what the
bench's enqueue_single times), ``cursor`` (its INSERT through db.fetchone_prepared, without
validation, encoding or the returned Job) and ``raw`` (the INSERT from raw psycopg, the
bench's enqueue_single_sql). Prints each series' median of this process's CPU per call
(time.process_time: steady on a busy machine, where wall time is not) and of its wall time.
The database must hold django-pgjobs' tables (manage.py migrate of bench/pgjobs_bench); its
jobs table is truncated. docs/performance.md quotes this script's numbers.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable

from benchlib import django_env

django_env.setup()

import pgjobs_client  # noqa: E402
from django.db import connection  # noqa: E402

from django_pgjobs import conf, db, queries  # noqa: E402

N, R = (int(os.environ.get(k, d)) for k, d in (("N", 3_000), ("R", 5)))


def cursor_one() -> Callable[[int], None]:
    sql = queries.insert_one_sql(conf.get("NOTIFY_CHANNEL"), False)

    def one(i: int) -> None:
        db.fetchone_prepared(
            None,
            sql,
            (
                "noop",
                "default",
                0,
                json.dumps({"i": i}),
                None,
                None,
                None,
                5,
                None,
                None,
                None,
                0.0,
                conf.get("NOTIFY_CHANNEL"),
            ),
        )

    return one


def one_round(enqueue_one: Callable[[int], None]) -> tuple[float, float]:
    """(CPU, wall) microseconds per call, after a warm-up like the bench's."""
    for i in range(20):
        enqueue_one(-1 - i)
    p0, w0 = time.process_time(), time.perf_counter()
    for i in range(N):
        enqueue_one(i)
    return (time.process_time() - p0) / N * 1e6, (time.perf_counter() - w0) / N * 1e6


def main() -> None:
    series = {
        "enqueue": pgjobs_client.enqueue_one,
        "cursor": cursor_one(),
        "raw": pgjobs_client.sql_enqueue_one(),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in series}
    for _ in range(R):
        with connection.cursor() as c:
            c.execute("TRUNCATE pgjobs_job")
        for name, one in series.items():
            samples[name].append(one_round(one))
    cpu = {name: statistics.median(s[0] for s in v) for name, v in samples.items()}
    for name, v in samples.items():
        wall = statistics.median(s[1] for s in v)
        print(
            f"{name:8s} CPU {cpu[name]:6.1f} µs/call  wall {wall:6.1f} µs/call  "
            f"(CPU per round: {', '.join(f'{s[0]:.0f}' for s in v)})"
        )
    print(
        f"enqueue - raw: {cpu['enqueue'] - cpu['raw']:.1f} µs of CPU per call; "
        f"enqueue - cursor (validation, encoding, the Job): {cpu['enqueue'] - cpu['cursor']:.1f}"
    )


if __name__ == "__main__":
    main()
