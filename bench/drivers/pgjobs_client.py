"""Producer for django-pgjobs: ``enqueue()`` in Django's autocommit mode (one job per
transaction, like a web request) and ``enqueue_many()`` (one call).

``enqueue_single_sql`` sends the INSERT that enqueue() sends, with the same parameters, from
raw psycopg (prepared, autocommit) into the same table: what the schema costs a one-job
transaction without the library's Python (compare it with the raw plain INSERT, and
enqueue_single with it)."""

import os
import sys
from collections.abc import Callable
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "pgjobs_bench"), str(here)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")

import django  # noqa: E402

django.setup()

import clientlib  # noqa: E402
from django_pgjobs import conf, enqueue, enqueue_many, queries  # noqa: E402


def enqueue_one(i: int) -> None:
    enqueue("noop", {"i": i}, queue="default")


def enqueue_batch(seqs: list[int]) -> None:
    enqueue_many("noop", [{"i": i} for i in seqs], queue="default")


def sql_enqueue_one() -> Callable[[int], None]:
    """enqueue_single_sql's enqueue_one, on its own psycopg connection."""
    import json

    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):  # psycopg's defaults:
        params.pop(django_only, None)  # server-side binding, prepared after 5 executions
    conn = psycopg.connect(**params, autocommit=True)
    channel = conf.get("NOTIFY_CHANNEL")

    def one(i: int) -> None:
        conn.execute(queries._INSERT_ONE_PLAIN, (
            "noop", "default", 0, json.dumps({"i": i}), None, None, None, 5, None, None, 0.0,
            channel), prepare=True).fetchone()

    return one


if __name__ == "__main__":
    clientlib.main(enqueue_one, enqueue_batch, {"enqueue_single_sql": sql_enqueue_one})
