"""What a unique window or a debounce costs next to a plain enqueue(), per enqueue.

    DATABASE_URL=postgres://USER@127.0.0.1:5432/DB .venv/bin/python bench/flow_enqueue.py

Each enqueue is its own transaction (autocommit), one client, the same job type:

    plain            enqueue("noop", cfg)
    unique_window    enqueue(..., unique_key=k, unique_for=1h), a fresh key each: the key row
                     and the job in one statement
    window_refused   the same key again while its window is open: refused, holder returned
    debounce_new     enqueue(..., debounce=1h, debounce_key=k), a fresh key each: an insert
    debounce_merge   the same key each time: merged into its open job (config replaced)

N enqueues per round (env N, default 2,000), R rounds interleaved (env R, default 5); prints
the median µs per enqueue and the ratio to plain, and writes bench/results/flow_enqueue.md.
The database must hold django-pgjobs' tables (manage.py migrate of bench/pgjobs_bench); its
jobs and unique tables are truncated.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "pgjobs_bench"), str(HERE / "drivers")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from django_pgjobs import enqueue  # noqa: E402

N, R = int(os.environ.get("N", 2_000)), int(os.environ.get("R", 5))
HOUR = 3600.0

VARIANTS: dict[str, Callable[[int, int], object]] = {
    "plain": lambda r, i: enqueue("noop", {"i": i}),
    "unique_window": lambda r, i: enqueue(
        "noop", {"i": i}, unique_key=f"u:{r}:{i}", unique_for=HOUR
    ),
    "window_refused": lambda r, i: enqueue(
        "noop", {"i": i}, unique_key=f"held:{r}", unique_for=HOUR
    ),
    "debounce_new": lambda r, i: enqueue(
        "noop", {"i": i}, debounce=HOUR, debounce_key=f"d:{r}:{i}"
    ),
    "debounce_merge": lambda r, i: enqueue(
        "noop", {"i": i}, debounce=HOUR, debounce_key=f"hot:{r}"
    ),
}


def one_round(variant: str, r: int) -> float:
    with connection.cursor() as c:
        c.execute("TRUNCATE pgjobs_job, pgjobs_unique")
    run = VARIANTS[variant]
    run(r, -1)  # warm: prepared statements, and the held key / the open job exist
    started = time.perf_counter()
    for i in range(N):
        run(r, i)
    return (time.perf_counter() - started) / N * 1e6


def main() -> None:
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(R):
        for variant in times:
            times[variant].append(one_round(variant, r))
    med = {v: statistics.median(t) for v, t in times.items()}
    lines = [
        "# Unique windows and debounce vs plain enqueue, per enqueue",
        "",
        f"`bench/flow_enqueue.py`, N={N} enqueues x R={R} rounds interleaved, medians (one "
        "client in autocommit, same machine as the server, loopback; load average "
        f"{os.getloadavg()[0]:.1f} at the end).",
        "",
        "| variant | µs per enqueue | ratio to plain |",
        "|---|---|---|",
        *(f"| {v} | {m:.0f} | {m / med['plain']:.2f}x |" for v, m in med.items()),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "flow_enqueue.md").write_text(text)


if __name__ == "__main__":
    main()
