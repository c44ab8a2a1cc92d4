"""Producer-side measurement loops shared by the Python clients (stdlib only).

A client module supplies callables; ``main()`` dispatches the command line

    enqueue_single N      -> {"n", "seconds", "rate"}      N jobs, one per transaction
    enqueue_bulk N        -> {"n", "seconds", "rate"}      one bulk call of N jobs
    prefill N             -> {"n", "seconds"}              untimed setup for a drain
    pickup N BUDGET_S     -> {"latencies_ms": [...], ...}  idle-worker pickup latency

and prints exactly one JSON object on the last stdout line.  A client's other kinds of
single enqueue (``singles``: raw's enqueue_single_plain, django-pgjobs' enqueue_single_sql)
run the same way (``CMD N``), and

    serve_single CMD      -> {"ready": true, ...}, then one JSON line per command on stdin

keeps a producer of CMD (enqueue_single or one of ``singles``) alive: the orchestrator hands
each single-enqueue series blocks of jobs in turn (see ``serve_single``).
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


def warm_up(enqueue_one: Callable[[int], None]) -> None:
    for i in range(WARMUP):  # connection set-up, prepared statements, import caches
        enqueue_one(-1 - i)


def enqueue_single(enqueue_one: Callable[[int], None], n: int) -> dict:
    warm_up(enqueue_one)
    t0 = time.perf_counter()
    for i in range(n):
        enqueue_one(i)
    dt = time.perf_counter() - t0
    return {"n": n, "seconds": dt, "rate": n / dt, "warmup_jobs": WARMUP}


def serve_single(enqueue_one: Callable[[int], None]) -> None:
    """The same warm-up and timed calls as ``enqueue_single``, in blocks the orchestrator asks
    for on stdin, so that the single-enqueue series can take turns every few dozen
    milliseconds (a commit's WAL flush drifts from second to second on a shared machine).

    ``run N`` enqueues the next N jobs (sequence numbers continue from block to block) and
    answers {"n": N, "seconds": S}, S timing those N calls alone; ``quit`` or EOF ends.
    """
    warm_up(enqueue_one)
    _emit({"ready": True, "warmup_jobs": WARMUP})
    seq = 0
    while line := sys.stdin.readline():
        words = line.split()
        if words == ["quit"]:
            break
        if len(words) != 2 or words[0] != "run":
            raise SystemExit(f"serve_single: unknown command {line.strip()!r}")
        n = int(words[1])
        t0 = time.perf_counter()
        for i in range(seq, seq + n):
            enqueue_one(i)
        dt = time.perf_counter() - t0
        seq += n
        _emit({"n": n, "seconds": dt})


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
    singles: dict[str, Callable[[], Callable[[int], None]]] | None = None,
) -> None:
    """``singles``: the client's other single-enqueue commands, each mapped to a function that
    sets it up (connection...) and returns its ``enqueue_one``."""
    cmd, args = sys.argv[1], sys.argv[2:]
    singles = singles or {}
    if cmd == "serve_producer":  # bench/producers.py: many producers at once
        import producer_loop

        make = (lambda: enqueue_one) if args[0] == "enqueue_single" else singles[args[0]]
        producer_loop.serve(make, warm_up, int(args[1]) if len(args) > 1 else 1)
        return
    if cmd == "serve_single":
        if args[0] != "enqueue_single" and args[0] not in singles:
            raise SystemExit(f"serve_single: unknown command {args[0]!r}")
        serve_single(enqueue_one if args[0] == "enqueue_single" else singles[args[0]]())
        return
    if cmd == "enqueue_single":
        res = enqueue_single(enqueue_one, int(args[0]))
    elif cmd in singles:
        res = enqueue_single(singles[cmd](), int(args[0]))
    elif cmd == "enqueue_bulk":
        res = enqueue_bulk(enqueue_many, int(args[0]))
    elif cmd == "prefill":
        res = prefill(enqueue_many, int(args[0]))
    elif cmd == "pickup":
        gap = (float(args[2]), float(args[3])) if len(args) >= 4 else (0.02, 0.05)
        res = pickup(enqueue_one, int(args[0]), float(args[1]), gap=gap)
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    _emit(res)
