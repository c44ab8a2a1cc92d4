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


# bench/producers.py's baselines: the same row into pgjobs_job_copy (LIKE pgjobs_job INCLUDING
# ALL: the same constraints and indexes), without NOTIFY, or with one NOTIFY per insert (what
# enqueue() sent before the doorbell).
COPY_TABLE = "pgjobs_job_copy"
_COPY_INSERT = (
    f"INSERT INTO {COPY_TABLE} ({queries._INSERT_COLUMNS}) VALUES (%s, %s, %s, %s::jsonb, %s, %s, "
    "%s, %s, %s, %s, COALESCE(%s::timestamptz, now() + %s * interval '1 second')) "
    f"RETURNING {queries._RETURN_COLUMNS}"
)


def _psycopg_one(statement: str, channel: bool) -> Callable[[int], None]:
    """An enqueue_one sending ``statement`` from raw psycopg (prepared, autocommit)."""
    import json

    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):  # psycopg's defaults:
        params.pop(django_only, None)  # server-side binding, prepared after 5 executions
    conn = psycopg.connect(**params, autocommit=True)
    extra = (conf.get("NOTIFY_CHANNEL"),) if channel else ()

    def one(i: int) -> None:
        conn.execute(
            statement,
            (
                "noop",
                "default",
                0,
                json.dumps({"i": i}),
                None,
                None,
                None,
                5,
                None,
                None,
                None,
                0.0,
                *extra,
            ),
            prepare=True,
        ).fetchone()

    return one


def sql_enqueue_one() -> Callable[[int], None]:
    """enqueue_single_sql: the INSERT enqueue() sends (with its doorbell), from raw psycopg."""
    return _psycopg_one(queries.insert_one_sql(conf.get("NOTIFY_CHANNEL"), False), True)


def copy_enqueue_one() -> Callable[[int], None]:
    return _psycopg_one(_COPY_INSERT, False)


def copy_notify_enqueue_one() -> Callable[[int], None]:
    notify_too = _COPY_INSERT.replace(" RETURNING", " RETURNING pg_notify(%s, queue)::text,")
    return _psycopg_one(notify_too, True)


if __name__ == "__main__":
    clientlib.main(
        enqueue_one,
        enqueue_batch,
        {
            "enqueue_single_sql": sql_enqueue_one,
            "enqueue_single_copy": copy_enqueue_one,
            "enqueue_single_copy_notify": copy_notify_enqueue_one,
        },
    )
