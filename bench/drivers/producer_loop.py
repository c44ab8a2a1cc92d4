"""One process of many concurrent producers (bench/producers.py), inside a system's environment.

    serve_producer CMD [THREADS]   -> {"ready": true}, then per stdin line
        go T0 SECONDS    every thread enqueues one job per transaction from CLOCK_MONOTONIC T0
                         for SECONDS -> {"n": jobs of all threads, "seconds": the longest}
        quit

THREADS (default 1) producers share the process, each with its own connection (what a threaded
web server does); all producers of a sample get the same T0 (CLOCK_MONOTONIC is system-wide),
so they start together after every one of them is warmed up and connected.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

SEQ_STRIDE = 10_000_000  # sequence numbers per producer (payloads stay distinct)


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _timed(enqueue_one: Callable[[int], None], seq: int, t0: float, seconds: float) -> tuple:
    while (left := t0 - time.monotonic()) > 0:
        time.sleep(left)
    end, n = t0 + seconds, 0
    while time.monotonic() < end:
        enqueue_one(seq + n)
        n += 1
    return n, time.monotonic() - t0


class _Producer(threading.Thread):
    """One producer thread: sets itself up (its own connection), then runs the samples."""

    def __init__(self, make, warm_up, seq: int) -> None:
        super().__init__(daemon=True)
        self.make, self.warm_up, self.seq = make, warm_up, seq
        self.orders: queue.Queue = queue.Queue()
        self.replies: queue.Queue = queue.Queue()
        self.start()

    def run(self) -> None:
        try:
            one = self.make()
            self.warm_up(one)
            self.replies.put(("ready", None))
            while (order := self.orders.get()) is not None:
                n, dt = _timed(one, self.seq, *order)
                self.seq += n
                self.replies.put(("done", (n, dt)))
        except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator
            self.replies.put(("error", repr(exc)))

    def reply(self):
        kind, value = self.replies.get()
        if kind == "error":
            raise SystemExit(f"serve_producer: a producer thread failed: {value}")
        return value


def serve(
    make: Callable[[], Callable[[int], None]],
    warm_up: Callable[[Callable[[int], None]], None],
    threads: int = 1,
) -> None:
    base = (os.getpid() % 1000) * SEQ_STRIDE
    workers = [_Producer(make, warm_up, base + t * (SEQ_STRIDE // 64)) for t in range(threads)]
    for w in workers:
        w.reply()
    _emit({"ready": True, "pid": os.getpid(), "threads": threads})
    while line := sys.stdin.readline():
        words = line.split()
        if words == ["quit"]:
            break
        if len(words) != 3 or words[0] != "go":
            raise SystemExit(f"serve_producer: unknown command {line.strip()!r}")
        for w in workers:
            w.orders.put((float(words[1]), float(words[2])))
        done = [w.reply() for w in workers]
        _emit({"n": sum(n for n, _ in done), "seconds": max(dt for _, dt in done)})
    for w in workers:
        w.orders.put(None)
