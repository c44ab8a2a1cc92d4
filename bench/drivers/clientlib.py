"""Producer-side measurement loops shared by the Python clients (stdlib only).

A client module supplies callables; ``main()`` dispatches the command line

    enqueue_single N      -> {"n", "seconds", "rate"}      N jobs, one per transaction
    enqueue_bulk N        -> {"n", "seconds", "rate"}      one bulk call of N jobs
    prefill N             -> {"n", "seconds"}              untimed setup for a drain
    pickup N BUDGET_S     -> {"latencies_ms": [...], ...}  idle-worker pickup latency

and prints exactly one JSON object on the last stdout line.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable

import probe

PICKUP_SEQ_BASE = 1_000_000_000
WARMUP = 20


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def enqueue_single(enqueue_one: Callable[[int], None], n: int) -> dict:
    for i in range(WARMUP):  # connection set-up, prepared statements, import caches
        enqueue_one(-1 - i)
    t0 = time.perf_counter()
    for i in range(n):
        enqueue_one(i)
    dt = time.perf_counter() - t0
    return {"n": n, "seconds": dt, "rate": n / dt, "warmup_jobs": WARMUP}


def enqueue_bulk(enqueue_many: Callable[[list[int]], None], n: int) -> dict:
    enqueue_many(list(range(-100, 0)))  # warm-up batch
    seqs = list(range(n))
    t0 = time.perf_counter()
    enqueue_many(seqs)
    dt = time.perf_counter() - t0
    return {"n": n, "seconds": dt, "rate": n / dt, "warmup_jobs": 100}


def prefill(enqueue_many: Callable[[list[int]], None], n: int, chunk: int = 50_000) -> dict:
    t0 = time.perf_counter()
    for start in range(0, n, chunk):
        enqueue_many(list(range(start, min(n, start + chunk))))
    return {"n": n, "seconds": time.perf_counter() - t0}


def pickup(
    enqueue_one: Callable[[int], None],
    samples: int,
    budget_s: float,
    gap=(0.02, 0.05),
    per_sample_timeout_s: float = 10.0,
) -> dict:
    """Enqueue one job at a time to an idle worker; latency = handler start - our COMMIT return.

    The producer takes CLOCK_MONOTONIC right after the enqueue call returned (its
    transaction is committed by then) and waits until the worker's probe slot shows that
    job's sequence number; the handler wrote its own CLOCK_MONOTONIC start time there.
    A random gap before each job (20-50 ms by default) lets the worker go idle again; for
    a worker that only polls, the gap spans its polling interval so that arrivals fall
    uniformly within it (as real traffic does) instead of just after a poll.
    """
    reader = probe.Reader(os.environ["BENCH_PROBE_FILE"])

    def wait_seen(seq: int, t0: int, timeout_s: float) -> int | None:
        deadline = t0 + int(timeout_s * 1e9)
        while True:
            ts = reader.seen(seq)
            if ts is not None:
                return ts
            if time.monotonic_ns() > deadline:
                return None
            time.sleep(0.0001)

    # warm-up: the worker may still be starting (imports, LISTEN)
    for w in range(1, 4):
        enqueue_one(PICKUP_SEQ_BASE - w)
        wait_seen(PICKUP_SEQ_BASE - w, time.monotonic_ns(), 60.0)
    rnd = random.Random(42)
    lat_ms: list[float] = []
    timeouts = 0
    t_end = time.monotonic() + budget_s
    for k in range(samples):
        if time.monotonic() > t_end:
            break
        time.sleep(rnd.uniform(*gap))
        seq = PICKUP_SEQ_BASE + k
        enqueue_one(seq)
        t_commit = time.monotonic_ns()
        ts = wait_seen(seq, t_commit, per_sample_timeout_s)
        if ts is None:
            timeouts += 1
        else:
            lat_ms.append((ts - t_commit) / 1e6)
        if timeouts >= 3:
            break
    return {"latencies_ms": lat_ms, "timeouts": timeouts, "samples": len(lat_ms)}


def main(
    enqueue_one: Callable[[int], None] | None,
    enqueue_many: Callable[[list[int]], None] | None,
    extra: dict[str, Callable[..., dict]] | None = None,
) -> None:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "enqueue_single":
        res = enqueue_single(enqueue_one, int(args[0]))
    elif cmd == "enqueue_bulk":
        res = enqueue_bulk(enqueue_many, int(args[0]))
    elif cmd == "prefill":
        res = prefill(enqueue_many, int(args[0]))
    elif cmd == "pickup":
        gap = (float(args[2]), float(args[3])) if len(args) >= 4 else (0.02, 0.05)
        res = pickup(enqueue_one, int(args[0]), float(args[1]), gap=gap)
    elif extra and cmd in extra:
        res = extra[cmd](*args)
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    _emit(res)
