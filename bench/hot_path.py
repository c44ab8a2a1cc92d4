"""The worker's hot path alone: claim/finalize cycles, no handler, no thread, CPU per job.

    DATABASE_URL=postgres://USER@127.0.0.1:5432/DB .venv/bin/python bench/hot_path.py \\
        [client] [prepared] [generic]

Prefills N no-op jobs (env N, default 10,000), then claims and finalizes them B at a time
(env B, default 50) through queries.finalize_and_claim, and prints the median over R rounds
(env R, default 4) of the backend's CPU per job (read from /proc/<pid>/stat, so the server
must run on this machine), this process's CPU per job and the wall time per job. Variants,
interleaved round by round:

    client    PGJOBS["PREPARED_STATEMENTS"] False: client-side binding, one multi-statement query
    prepared  prepared and pipelined, planned at every execution (plan_cache_mode auto)
    generic   prepared and pipelined, planned once (force_generic_plan, what the worker sets)

The database must hold django-pgjobs' tables (manage.py migrate of bench/pgjobs_bench); its
jobs table is truncated. docs/performance.md quotes this script's numbers.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from benchlib import django_env

django_env.setup()

from django.db import connection  # noqa: E402

from django_pgjobs import conf, enqueue_many, queries  # noqa: E402
from django_pgjobs.queries import Completion  # noqa: E402

N, B, R = (int(os.environ.get(k, d)) for k, d in (("N", 10_000), ("B", 50), ("R", 4)))
VARIANTS = {
    "client": (False, "auto"),
    "prepared": (True, "auto"),
    "generic": (True, "force_generic_plan"),
}


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(variant: str) -> tuple[float, float, float]:
    prepared, plan_mode = VARIANTS[variant]
    conf.get_settings()["PREPARED_STATEMENTS"] = prepared
    with connection.cursor() as c:
        c.execute(f"SET plan_cache_mode = {plan_mode}")
        c.execute("TRUNCATE pgjobs_job")
    enqueue_many("noop", [{"i": i} for i in range(N)], queue="default")
    with connection.cursor() as c:
        c.execute("VACUUM pgjobs_job")
        c.execute("SELECT pg_backend_pid()")
        pid = c.fetchone()[0]
    args = dict(
        worker_id="hot-path", types=["noop"], queues=["default"], limit=B, lease_seconds=30.0
    )
    b0, p0, t0 = backend_cpu(pid), time.process_time(), time.perf_counter()
    rows, done = queries.claim(**args), 0
    while rows:
        completions = [
            Completion(id=r.id, token=r.lease_token, attempt=r.attempts, status="COMPLETED")
            for r in rows
        ]
        written, rows = queries.finalize_and_claim(completions, **args)
        done += len(written)
    wall = time.perf_counter() - t0
    return (
        (backend_cpu(pid) - b0) / done * 1e6,
        (time.process_time() - p0) / done * 1e6,
        wall / done * 1e6,
    )


def main() -> None:
    variants = sys.argv[1:] or list(VARIANTS)
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variant(s) {sorted(unknown)}; choose among {list(VARIANTS)}")
    one_round(variants[0])  # leaves a table of finished jobs: the statistics of a steady state
    with connection.cursor() as c:
        c.execute("ANALYZE pgjobs_job")
    samples: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
    for _ in range(R):
        for v in variants:
            samples[v].append(one_round(v))
    print(f"{N:,} jobs, {B} per cycle, median of {R} rounds (µs per job claimed and finalized)")
    for v, xs in samples.items():
        backend, client, wall = (statistics.median(x[i] for x in xs) for i in range(3))
        print(f"  {v:9s} backend {backend:6.1f}  client {client:6.1f}  wall {wall:6.1f}")


if __name__ == "__main__":
    main()
