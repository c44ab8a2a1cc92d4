"""What a single enqueue pays, part by part, against a bare INSERT (issue 26 §6).

    DATABASE_URL=postgres://USER@127.0.0.1:5432/DB bench/.venvs/pgjobs/bin/python \\
        bench/enqueue_parts.py [--turns T] [--block B] [--out bench/results/enqueue_parts.md]

One producer, one job per transaction (autocommit), prepared statements from raw psycopg,
except `enqueue()` (django_pgjobs.enqueue through Django). Series, each its own table:

  seed            the seeds' plain `jobs` table (/work/shared/seeds: identity key, CHECK on
                  status, two indexes, FK to tenants), its own statement shape
  seed_nofk       the same without the FK: the bare INSERT, the baseline of every ratio
  bare            pgjobs_job's columns and defaults, its primary key only; enqueue()'s row
  +checks         bare + pgjobs_job's CHECK constraints
  +idx:NAME       bare + one of pgjobs_job's indexes (each partial index costs its predicate;
                  one whose predicate holds for a new job also an index entry)
  copy            LIKE pgjobs_job INCLUDING ALL (every CHECK and index), no doorbell
  pgjobs_job      enqueue()'s INSERT into the real table without the doorbell
  +gate           pgjobs_job + the doorbell's first step only (G shared until commit)
  +ring(*)        pgjobs_job + a doorbell of one sleepers' lock (G, then S(*): before 26 §5)
  pgjobs_sql      enqueue()'s INSERT as sent (G, S(*), S(its queue); nobody sleeps)
  django_sql      the same through Django's connection (db.fetchone_prepared, as enqueue()
                  sends it) without enqueue()'s validation, encoding and Job
  enqueue()       the public API: validation, encoding, the Job returned

Series take turns in blocks of B calls (the order rotates every turn), so every series sees
the same stretches of the machine's commit latency; a ratio is taken to seed_nofk's block of
the same turn, and the report gives the median of those ratios, with each series' median wall
and client CPU per call. The database must hold django-pgjobs' tables (manage.py migrate of
bench/pgjobs_bench); the series' tables are created (pgjobs_part_*, seed_*) and dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from benchlib import django_env

django_env.setup()

import pgjobs_client  # noqa: E402
import psycopg  # noqa: E402
from django.db import connection  # noqa: E402

from django_pgjobs import conf, db, doorbell, queries  # noqa: E402

TENANT = "00000000-0000-0000-0000-000000000001"
SEED_SQL = """
DROP TABLE IF EXISTS seed_jobs, seed_jobs_nofk, seed_tenants;
CREATE TABLE seed_tenants (id UUID PRIMARY KEY);
INSERT INTO seed_tenants VALUES ('00000000-0000-0000-0000-000000000001');
CREATE TABLE seed_jobs (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   UUID NOT NULL REFERENCES seed_tenants (id),
    type        TEXT NOT NULL,
    operated_by UUID,
    status      TEXT NOT NULL DEFAULT 'PENDING'
                CHECK (status IN ('PENDING', 'RUNNING', 'COMPLETED',
                                  'COMPLETED_WITH_ERRORS', 'FAILED')),
    config      JSONB NOT NULL DEFAULT '{}'::jsonb,
    result      JSONB NOT NULL DEFAULT '{}'::jsonb,
    error       TEXT,
    trace_id    TEXT,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    duration_ms BIGINT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ON seed_jobs (type, tenant_id, created_at DESC);
CREATE INDEX ON seed_jobs (created_at) WHERE status IN ('PENDING', 'RUNNING');
CREATE TABLE seed_jobs_nofk (LIKE seed_jobs INCLUDING ALL);
"""
SEED_INSERT = (
    "INSERT INTO {table} (tenant_id, type, operated_by, config, trace_id) "
    "VALUES (%s, %s, %s, %s::jsonb, %s) RETURNING id, created_at"
)
PART_INSERT = (
    f"INSERT INTO {{table}} ({queries._INSERT_COLUMNS}) VALUES (%s, %s, %s, %s::jsonb, %s, %s, "
    "%s, %s, %s, %s, COALESCE(%s::timestamptz, now() + %s * interval '1 second')) "
    f"RETURNING {queries._RETURN_COLUMNS}"
)
BASELINE = "seed_nofk"


def tables(raw: psycopg.Connection) -> dict[str, str]:
    """Create the series' tables; {series: table}."""
    raw.execute(SEED_SQL)
    made = {"seed": "seed_jobs", BASELINE: "seed_jobs_nofk"}

    def like(table: str, including: str) -> None:
        raw.execute(f"DROP TABLE IF EXISTS {table}")
        raw.execute(f"CREATE TABLE {table} (LIKE pgjobs_job {including})")

    like("pgjobs_part_bare", "INCLUDING DEFAULTS INCLUDING IDENTITY")
    raw.execute("ALTER TABLE pgjobs_part_bare ADD PRIMARY KEY (id)")
    made["bare"] = "pgjobs_part_bare"
    like("pgjobs_part_checks", "INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS")
    raw.execute("ALTER TABLE pgjobs_part_checks ADD PRIMARY KEY (id)")
    made["+checks"] = "pgjobs_part_checks"
    indexes = [
        r[0]
        for r in raw.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'pgjobs_job' "
            "AND indexname <> 'pgjobs_job_pkey' ORDER BY indexname"
        )
    ]
    for n, name in enumerate(indexes):
        table = f"pgjobs_part_idx{n}"
        like(table, "INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES")
        kept = pg_index_of(raw, table, name)
        for (other,) in raw.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname <> %s "
            "AND indexname NOT LIKE '%%pkey'",
            [table, kept],
        ).fetchall():
            raw.execute(f'DROP INDEX "{other}"')
        made[f"+idx:{name.removeprefix('pgjobs_job_')}"] = table
    like("pgjobs_part_copy", "INCLUDING ALL")
    made["copy"] = "pgjobs_part_copy"
    return made


def pg_index_of(raw: psycopg.Connection, table: str, original: str) -> str:
    """The name LIKE ... INCLUDING INDEXES gave ``table``'s copy of ``original``."""
    definition = raw.execute(
        "SELECT regexp_replace(indexdef, '^.* USING ', '') FROM pg_indexes WHERE indexname = %s",
        [original],
    ).fetchone()[0]
    for name, indexdef in raw.execute(
        "SELECT indexname, regexp_replace(indexdef, '^.* USING ', '') FROM pg_indexes "
        "WHERE tablename = %s",
        [table],
    ):
        if indexdef == definition:
            return name
    raise SystemExit(f"no copy of {original} on {table}")


def raw_one(raw: psycopg.Connection, statement: str, params: Callable[[int], tuple]):
    def one(i: int) -> None:
        raw.execute(statement, params(i), prepare=True).fetchone()

    return one


def job_params(i: int) -> tuple:
    return ("noop", "default", 0, json.dumps({"i": i}), None, None, None, 5, None, None, None, 0.0)


def series(raw: psycopg.Connection) -> dict[str, Callable[[int], None]]:
    made = tables(raw)
    out: dict[str, Callable[[int], None]] = {}
    for name, table in made.items():
        if name in ("seed", BASELINE):
            out[name] = raw_one(
                raw,
                SEED_INSERT.format(table=table),
                lambda i: (TENANT, "noop", None, json.dumps({"i": i}), None),
            )
        else:
            out[name] = raw_one(raw, PART_INSERT.format(table=table), job_params)
    out["pgjobs_job"] = raw_one(raw, PART_INSERT.format(table="pgjobs_job"), job_params)
    channel = conf.get("NOTIFY_CHANNEL")
    k = doorbell.channel_key(channel)
    gate = f"pg_try_advisory_xact_lock_shared({doorbell._GATE}, {k})"
    one_lock = (  # the doorbell before per-queue sleepers
        f"CASE WHEN NOT {gate} THEN true WHEN pg_try_advisory_lock({doorbell._SLEEPERS}, {k}) "
        f"THEN NOT pg_advisory_unlock({doorbell._SLEEPERS}, {k}) ELSE true END"
    )
    for name, expr in (("+gate", gate), ("+ring(*)", one_lock)):
        out[name] = raw_one(raw, PART_INSERT.format(table="pgjobs_job") + f", {expr}", job_params)
    out["pgjobs_sql"] = raw_one(
        raw, queries.insert_one_sql(channel, False), lambda i: (*job_params(i), channel)
    )
    insert = queries.insert_one_sql(channel, False)
    out["django_sql"] = lambda i: db.fetchone_prepared(None, insert, (*job_params(i), channel))
    out["enqueue()"] = pgjobs_client.enqueue_one
    return out


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process ``pid`` used so far (the server runs here)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(turns: int, block: int, only: set[str] | None = None) -> dict:
    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    raw = psycopg.connect(**params, autocommit=True)
    with connection.cursor() as c:
        c.execute("TRUNCATE pgjobs_job")
    todo = series(raw)
    todo = {n: f for n, f in todo.items() if not only or n in only or n == BASELINE}
    names = list(todo)
    for one in todo.values():  # warm-up: connections, prepared statements
        for i in range(20):
            one(-1 - i)
    pids = {n: raw.info.backend_pid for n in names}
    pids["enqueue()"] = pids["django_sql"] = connection.connection.info.backend_pid
    blocks: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    server: dict[str, float] = dict.fromkeys(names, 0.0)  # backend CPU seconds
    seq = 0
    for turn in range(turns):
        order = names[turn % len(names) :] + names[: turn % len(names)]
        for name in order:
            one = todo[name]
            s0 = backend_cpu(pids[name])
            p0, w0 = time.process_time(), time.perf_counter()
            for i in range(seq, seq + block):
                one(i)
            server[name] += backend_cpu(pids[name]) - s0
            blocks[name].append(
                ((time.perf_counter() - w0) / block * 1e6, (time.process_time() - p0) / block * 1e6)
            )
            seq += block
    raw.execute(
        "DROP TABLE IF EXISTS seed_jobs, seed_jobs_nofk, seed_tenants, pgjobs_part_bare, "
        "pgjobs_part_checks, pgjobs_part_copy"
    )
    for (t,) in raw.execute(
        "SELECT tablename FROM pg_tables WHERE tablename LIKE 'pgjobs\\_part\\_idx%'"
    ).fetchall():
        raw.execute(f"DROP TABLE {t}")
    raw.close()
    calls = turns * block
    return {
        "turns": turns,
        "block": block,
        "blocks": blocks,
        "server_us": {n: v / calls * 1e6 for n, v in server.items()},
    }


def render(result: dict) -> str:
    blocks = result["blocks"]
    base = blocks[BASELINE]
    lines = [
        "# A single enqueue, part by part (bench/enqueue_parts.py)",
        "",
        f"{result['finished']}; {result['turns']} turns of {result['block']} calls per series, "
        f"one job per transaction, one producer. Speed ratio: the median over turns of "
        f"`{BASELINE}`'s wall per call over the series' in the same turn (1.00× = as fast as "
        "the bare INSERT; the goal, issue 26: `enqueue()` ≥ 0.85×). Wall and client CPU: "
        "medians, µs per call; server CPU: the backend's over all turns, µs per call (/proc "
        "ticks: ±10 ms over the run).",
        "",
        "| series | speed vs bare INSERT | wall µs | client CPU µs | server CPU µs |",
        "|---|---|---|---|---|",
    ]
    for name, got in blocks.items():
        ratio = statistics.median(b[0] / s[0] for b, s in zip(base, got, strict=True))
        wall = statistics.median(s[0] for s in got)
        cpu = statistics.median(s[1] for s in got)
        srv = result["server_us"][name]
        lines.append(f"| {name} | {ratio:.2f}× | {wall:.0f} | {cpu:.0f} | {srv:.0f} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--block", type=int, default=100)
    ap.add_argument("--only", help="comma-separated series (the baseline always runs)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "enqueue_parts.md"))
    args = ap.parse_args()
    result = run(args.turns, args.block, set(args.only.split(",")) if args.only else None)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    text = render(result)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(result))
    print(text)


if __name__ == "__main__":
    main()
