"""Micro-benchmark: the finalize's JSON of a plain success, hand-formatted vs json.dumps.

    .venv/bin/python bench/completion_json.py

queries._finalize_params() sends every completion of a batch as one JSON array; most are plain
successes (no result, error, delay, note or progress). This times, per completion, the named
helper queries._success_json() against json.dumps(Completion.as_record()) and json.dumps of
the five fields alone for such a success
(and for a batch of 50, as the worker sends), median of R rounds (env R, default 7) of N calls
(env N, default 200,000), CPU time of this process. No database is needed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from django_pgjobs.queries import Completion, _completion_json, _success_json  # noqa: E402

LEASE = "0b7e6f4e-4c1b-4a55-9b1e-6a0f6c1f2d3e"  # a lease token


def per_call(fn, arg, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        fn(arg)
    return (time.process_time() - start) / n * 1e6  # µs


def dumps(c: Completion) -> str:
    return json.dumps(c.as_record(), separators=(",", ":"))


def dumps_minimal(c: Completion) -> str:
    """The fairest json.dumps: only the five fields a plain success has."""
    return json.dumps(
        {
            "id": c.id,
            "token": str(c.token),
            "attempt": c.attempt,
            "status": c.status,
            "duration_ms": c.duration_ms,
        },
        separators=(",", ":"),
    )


def main() -> None:
    rounds, n = int(os.environ.get("R", 7)), int(os.environ.get("N", 200_000))
    c = Completion(id=123456, token=LEASE, attempt=1, status="COMPLETED", duration_ms=3)
    assert json.loads(_success_json(c)) == {k: v for k, v in c.as_record().items() if v is not None}
    batch = [
        Completion(id=i, token=LEASE, attempt=1, status="COMPLETED", duration_ms=3)
        for i in range(50)
    ]
    series = {
        "helper (hand-formatted)": (_completion_json, c, n),
        "json.dumps(as_record())": (dumps, c, n),
        "json.dumps(5 fields)": (dumps_minimal, c, n),
        "batch of 50, helper": (lambda b: ",".join(map(_completion_json, b)), batch, n // 50),
        "batch of 50, json.dumps": (lambda b: ",".join(map(dumps, b)), batch, n // 50),
    }
    found: dict[str, list[float]] = {name: [] for name in series}
    for _ in range(rounds):  # interleaved, so that drift falls on every series alike
        for name, (fn, arg, calls) in series.items():
            found[name].append(per_call(fn, arg, calls))
    for name, values in found.items():
        print(
            f"{name:26} {statistics.median(values):8.3f} µs per call "
            f"(min {min(values):.3f}, max {max(values):.3f})"
        )


if __name__ == "__main__":
    main()
