"""Raw psycopg 3 job queue: the floor that any PostgreSQL queue pays (systems b and c).

    python raw.py schema
    python raw.py enqueue_single N | enqueue_single_plain N | enqueue_bulk N | prefill N | pickup N S
    python raw.py serve_single enqueue_single|enqueue_single_plain
    python raw.py worker --mode limit|perjob [--batch 100] [--burst]

Schema: one table, a partial index on pending rows, and a statement-level trigger that
NOTIFYs idle workers.  ``raw_plain`` is the same table without the trigger: its single
INSERT is the "raw single INSERT" the enqueue target is compared to.

Worker modes:
  limit   claim a batch with one UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)
          RETURNING, run the handlers, then finalize the whole batch with one UPDATE.
  perjob  the tutorial way: claim a batch of 100 the same way, then one UPDATE
          (one transaction) per finished job.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import clientlib
import probe
import psycopg
from psycopg.types.json import Jsonb

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench_raw")
QUEUE = "default"

SCHEMA = """
DROP TABLE IF EXISTS raw_jobs, raw_plain CASCADE;
CREATE TABLE raw_jobs (
    id          bigserial PRIMARY KEY,
    queue       text        NOT NULL DEFAULT 'default',
    payload     jsonb       NOT NULL,
    status      text        NOT NULL DEFAULT 'pending',
    attempts    integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz
);
CREATE INDEX raw_jobs_pending ON raw_jobs (queue, id) WHERE status = 'pending';
CREATE TABLE raw_plain (LIKE raw_jobs INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE OR REPLACE FUNCTION raw_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('raw_jobs', '');
    RETURN NULL;
END $$;
CREATE TRIGGER raw_jobs_notify AFTER INSERT ON raw_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION raw_jobs_notify();
"""

CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT id FROM raw_jobs
    WHERE status = 'pending' AND queue = %s
    ORDER BY id
    FOR UPDATE SKIP LOCKED
    LIMIT %s
)
UPDATE raw_jobs j
   SET status = 'running', started_at = now(), attempts = j.attempts + 1
  FROM picked
 WHERE j.id = picked.id
RETURNING j.id, j.payload
"""
COMPLETE_MANY = "UPDATE raw_jobs SET status = 'done', finished_at = now() WHERE id = ANY(%s)"
COMPLETE_ONE = "UPDATE raw_jobs SET status = 'done', finished_at = now() WHERE id = %s"
INSERT = "INSERT INTO raw_jobs (queue, payload) VALUES (%s, %s)"
INSERT_PLAIN = "INSERT INTO raw_plain (queue, payload) VALUES (%s, %s)"

# finished history for the "1M finished rows" case, and the orchestrator's probes
FINISHED_SQL = """
INSERT INTO raw_jobs (queue, payload, status, attempts, created_at, started_at, finished_at)
SELECT 'default', jsonb_build_object('i', g), 'done', 1, now(), now(), now()
FROM generate_series(1, %(n)s) g
"""
REMAINING_SQL = "SELECT count(*) FROM raw_jobs WHERE status IN ('pending', 'running')"
TABLES = ["raw_jobs", "raw_plain"]


def handler(payload) -> None:
    probe.hit(payload.get("i", -1))


_conn = None


def conn() -> psycopg.Connection:
    global _conn
    if _conn is None:
        _conn = psycopg.connect(URL, autocommit=True)
    return _conn


def enqueue_one(i: int) -> None:
    conn().execute(INSERT, (QUEUE, Jsonb({"i": i})), prepare=True)


def enqueue_one_plain(i: int) -> None:
    conn().execute(INSERT_PLAIN, (QUEUE, Jsonb({"i": i})), prepare=True)


def enqueue_many(seqs: list[int]) -> None:
    c = conn()
    with c.transaction(), c.cursor() as cur:
        with cur.copy("COPY raw_jobs (queue, payload) FROM STDIN") as cp:
            for i in seqs:
                cp.write_row((QUEUE, f'{{"i": {int(i)}}}'))


def worker(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["limit", "perjob"], default="limit")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--burst", action="store_true")
    ap.add_argument(
        "--idle-timeout",
        type=float,
        default=0.5,
        help="longest idle wait between checks for SIGTERM (NOTIFY wakes it at once)",
    )
    a = ap.parse_args(argv)

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    c = psycopg.connect(URL, autocommit=True)
    if not a.burst:
        c.execute("LISTEN raw_jobs")
    while not stop:
        with c.transaction():
            rows = c.execute(CLAIM, (QUEUE, a.batch), prepare=True).fetchall()
        if not rows:
            if a.burst:
                break
            # wake up on NOTIFY (notifications that came in meanwhile are backlogged)
            for _ in c.notifies(timeout=a.idle_timeout, stop_after=1):
                pass
            continue
        if a.mode == "limit":
            done = []
            for job_id, payload in rows:
                handler(payload)
                done.append(job_id)
            with c.transaction():
                c.execute(COMPLETE_MANY, (done,), prepare=True)
        else:
            for job_id, payload in rows:
                handler(payload)
                c.execute(COMPLETE_ONE, (job_id,), prepare=True)  # autocommit: 1 tx per job
    c.close()


def main() -> None:
    cmd = sys.argv[1]
    if cmd == "schema":
        with psycopg.connect(URL, autocommit=True) as c:
            c.execute(SCHEMA)
        print(json.dumps({"ok": True}))
    elif cmd == "worker":
        worker(sys.argv[2:])
    else:
        singles = {"enqueue_single_plain": lambda: enqueue_one_plain}
        clientlib.main(enqueue_one, enqueue_many, singles)


if __name__ == "__main__":
    main()
