"""One of many concurrent producers (bench/producers.py), inside a system's environment.

    serve_producer CMD   -> {"ready": true}, then per stdin line
        go T0 SECONDS    enqueue one job per transaction from CLOCK_MONOTONIC T0 for SECONDS
                         -> {"n": jobs, "seconds": elapsed}
        quit

All producers of a sample get the same T0 (CLOCK_MONOTONIC is system-wide), so they start
together after every one of them is warmed up and connected.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

SEQ_STRIDE = 10_000_000  # sequence numbers per producer process (payloads stay distinct)


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(
    enqueue_one: Callable[[int], None], warm_up: Callable[[Callable[[int], None]], None]
) -> None:
    warm_up(enqueue_one)
    _emit({"ready": True, "pid": os.getpid()})
    seq = (os.getpid() % 1000) * SEQ_STRIDE
    while line := sys.stdin.readline():
        words = line.split()
        if words == ["quit"]:
            break
        if len(words) != 3 or words[0] != "go":
            raise SystemExit(f"serve_producer: unknown command {line.strip()!r}")
        t0, seconds = float(words[1]), float(words[2])
        while (left := t0 - time.monotonic()) > 0:
            time.sleep(left)
        end, n = t0 + seconds, 0
        while time.monotonic() < end:
            enqueue_one(seq)
            seq += 1
            n += 1
        _emit({"n": n, "seconds": time.monotonic() - t0})
