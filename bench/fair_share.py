"""Measure how long a small tenant waits behind a big tenant's backlog, with and without
PGJOBS["FAIR_SHARE"].

    DATABASE_URL=postgres://... python bench/fair_share.py [--big 10000] [--small 10] [--reps 3]

Writes bench/results/fair_share.md. Jobs are no-ops run by one in-process worker
(4 threads, batch 50): the figure is the small tenant's wait (finished_at - created_at).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup() -> None:
    import django
    import environ
    from django.conf import settings

    db = environ.Env().db_url("DATABASE_URL")
    db["NAME"] = os.environ.get("FAIR_DB", "pgjobs_bench_fair")
    settings.configure(
        DATABASES={"default": db},
        INSTALLED_APPS=["django_pgjobs"],
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        PGJOBS={},
    )
    import psycopg

    admin = environ.Env().db_url("DATABASE_URL")
    with psycopg.connect(
        host=admin["HOST"] or None,
        port=admin["PORT"] or None,
        user=admin["USER"] or None,
        password=admin["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}"')
        conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def run(big: int, small: int, fair: bool) -> list[float]:
    from django.db import connection

    from django_pgjobs import enqueue_many, handler, registry
    from django_pgjobs.worker import Worker, WorkerOptions

    if registry.get("bench.noop") is None:
        handler("bench.noop")(lambda job: None)
    with connection.cursor() as cur:
        cur.execute("TRUNCATE pgjobs_job")
    enqueue_many("bench.noop", [{}] * big, tenant_id="big")
    enqueue_many("bench.noop", [{}] * small, tenant_id="small")
    Worker(
        WorkerOptions.from_settings(
            burst=True,
            listen=False,
            install_signal_handlers=False,
            concurrency=4,
            batch_size=50,
            fair_share=fair,
        )
    ).run()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT extract(epoch FROM finished_at - created_at) FROM pgjobs_job "
            "WHERE tenant_id = 'small' AND status = 'COMPLETED'"
        )
        return [float(r[0]) for r in cur.fetchall()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    setup()
    lines = [
        f"# Fair share: small tenant's wait ({args.small} jobs) behind a {args.big:,}-job backlog",
        "",
        f"One in-process worker, 4 threads, batch 50, no-op jobs; "
        f"{args.reps} runs each; {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores.",
        "",
        "| FAIR_SHARE | median wait p50 | median wait max | runs (p50 s) |",
        "|---|---|---|---|",
    ]
    for fair in (False, True):
        p50s, maxes = [], []
        for _ in range(args.reps):
            waits = run(args.big, args.small, fair)
            assert len(waits) == args.small
            p50s.append(statistics.median(waits))
            maxes.append(max(waits))
        lines.append(
            f"| {fair} | {statistics.median(p50s) * 1000:.0f} ms | "
            f"{statistics.median(maxes) * 1000:.0f} ms | "
            f"{', '.join(f'{x:.3f}' for x in p50s)} |"
        )
    out = ROOT / "bench" / "results" / "fair_share.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
