"""A producer process for tests/concurrency/test_flow_races.py: ``python -m
tests.concurrency.flow_producer TAG COUNT DEBOUNCE KEY`` enqueues COUNT debounced jobs of KEY,
each in its own transaction, and prints one JSON list of [tag, n, job id, inserted, written at]
(the database clock right after the enqueue, before the commit)."""

from __future__ import annotations

import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from django.db import connection, transaction  # noqa: E402

from django_pgjobs import enqueue  # noqa: E402


def produce(tag: str, count: int, debounce: float, key: str) -> list[list[object]]:
    records: list[list[object]] = []
    for n in range(count):
        with transaction.atomic():
            job = enqueue(  # the max wait makes a job due while the producers still write
                "test.echo",
                {"w": tag, "n": n},
                debounce=debounce,
                debounce_key=key,
                debounce_max_wait=debounce * 3,
            )
            with connection.cursor() as cur:
                cur.execute("SELECT clock_timestamp()")
                written = cur.fetchone()[0]
        records.append([tag, n, job.id, not job.deduplicated, written.isoformat()])
    return records


if __name__ == "__main__":
    tag, count, debounce, key = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    print(json.dumps(produce(tag, count, debounce, key)))
