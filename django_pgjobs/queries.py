"""THE room for SQL that changes job state: every statement that writes pgjobs_job is here
(tests/unit/test_job_writers.py fails on a writer elsewhere).

Every transition of the state machine is one statement here, fenced by the database:

    enqueue      (nothing)  -> PENDING              INSERT (+ NOTIFY if a worker sleeps)
    workflow     (nothing)  -> WAITING | PENDING    a step waits for its dependencies to end
    fan-in       WAITING    -> PENDING | CANCELLED  in the statement that ends its last dependency
    claim        PENDING    -> RUNNING              lock with SKIP LOCKED, attempts + 1, new lease
                                                    controlled queues: after the queue's lock,
                                                    within cap, per-key limit and rate (pgjobs_rate),
                                                    by fair share (stride passes in pgjobs_share)
    heartbeat    RUNNING    -> RUNNING              extend the lease of jobs we still hold
    progress     RUNNING    -> RUNNING              the handler's latest job.progress(...)
    finalize     RUNNING    -> COMPLETED | COMPLETED_WITH_ERRORS | FAILED | PENDING (retry)
    release      RUNNING    -> PENDING              shutdown: attempt refunded
    reap         RUNNING    -> PENDING | FAILED     lease expired (worker died)
    retry        FAILED | COMPLETED_WITH_ERRORS | CANCELLED -> PENDING   (manual)
    run_now      PENDING (later) -> PENDING (due now)                    (manual)
    cancel       PENDING | WAITING -> CANCELLED; RUNNING -> cancel requested (manual)
    duplicate    (nothing)  -> PENDING              a fresh copy of each job (manual)
    note         any        -> same                 who did an operator action, in the history
    delete       terminal   -> (gone)               operator delete of finished jobs
    prune        terminal   -> (gone)               retention: finished jobs past their days

A worker only ever writes a job through its lease token: a statement that finds the token gone
(reaped, released, finalized) changes nothing and the caller is told so. Times are the database
clock (``now()``); durations are measured by the worker. Cursors and prepared statements are
in db.py; SQL that changes no job's state lives with its table in sql/.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connections, transaction

from . import conf, db, doorbell, flow
from .status import (
    ACTIVE_SQL,
    CANCELLED_SQL,
    FAILED_SQL,
    FAILURE_SQL,
    PENDING_SQL,
    RETRYABLE_SQL,
    RUNNING_SQL,
    TERMINAL_SQL,
    TERMINAL_STATUSES,
    WAITING_SQL,
)
from .tables import (
    DEPENDENCY_TABLE,
    JOB_TABLE,
    QUEUE_TABLE,
    RATE_TABLE,
    SHARE_TABLE,
    UNIQUE_TABLE,
    WORKFLOW_TABLE,
)
from .validation import decode_config

T = JOB_TABLE


# --- enqueue -----------------------------------------------------------------------------------

_INSERT_COLUMNS = (
    "type, queue, priority, config, trace_id, tenant_id, operated_by, max_attempts, unique_key, "
    "flow_key, run_after"
)
# updated_at = created_at (both statement_timestamp()): not returned
_RETURN_COLUMNS = "id, run_after, created_at"

# The doorbell rides in RETURNING (cheaper than a CTE around the INSERT): evaluated once per
# inserted row, none when ON CONFLICT skipped it; a NOTIFY only while a worker sleeps
# (doorbell.py), delivered on commit.
_INSERT_ONE = f"""
INSERT INTO {T} ({_INSERT_COLUMNS})
VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s,
        COALESCE(%s::timestamptz, now() + %s * interval '1 second'))
{{on_conflict}}
RETURNING {_RETURN_COLUMNS}, {{ring}}
"""

_ON_CONFLICT_UNIQUE = (
    f"ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN {ACTIVE_SQL} DO NOTHING"
)


@functools.cache
def insert_one_sql(channel: str, unique: bool) -> str:
    """enqueue()'s INSERT for ``channel`` (the doorbell's lock keys are literals in it)."""
    return _INSERT_ONE.format(
        on_conflict=_ON_CONFLICT_UNIQUE if unique else "",
        ring=doorbell.ring_sql(channel, "run_after <= now()", "queue"),
    )


@dataclass(slots=True)
class NewJob:
    type: str
    queue: str
    priority: int
    config_json: str
    trace_id: str | None
    tenant_id: str | None
    operated_by: str | None
    max_attempts: int
    unique_key: str | None
    run_at: datetime | None  # absolute time, or
    delay: float  # seconds from the database's now()
    debounce_key: str | None = None
    flow_key: str | None = None


def insert_job(job: NewJob, using: str | None = None) -> tuple[int, datetime, datetime] | None:
    """Insert one job and ring the doorbell if a worker sleeps (delivered on commit); returns
    (id, run_after, created_at), None when the unique key is taken."""
    channel = conf.get("NOTIFY_CHANNEL")
    params = (*_job_params(job), job.unique_key, job.flow_key, job.run_at, job.delay, channel)
    row = db.fetchone_prepared(using, insert_one_sql(channel, bool(job.unique_key)), params)
    return None if row is None else row[:3]


# --- enqueue with flow control (unique windows, debounce) -------------------------------------

# A unique window: the key's row in pgjobs_unique is taken (or retaken once its window passed
# and no job of the key is active) in the job's own INSERT statement, so the key and the job
# commit or roll back together. A concurrent enqueue of the key waits on the key row (ON
# CONFLICT) and then sees it taken: one job per window, whatever becomes of it (finished,
# pruned). The job id is drawn first (nextval) so that the key row can name it.
_INSERT_WINDOWED = f"""
WITH win AS (
    INSERT INTO {UNIQUE_TABLE} AS u (key, job_id, until)
    SELECT %s, nextval(pg_get_serial_sequence('{T}', 'id')),
           now() + %s::float8 * interval '1 second'
    WHERE NOT EXISTS (SELECT 1 FROM {T} a WHERE a.unique_key = %s AND a.status IN {ACTIVE_SQL})
    ON CONFLICT (key) DO UPDATE SET job_id = EXCLUDED.job_id, until = EXCLUDED.until
    WHERE u.until <= now()
    RETURNING job_id
)
INSERT INTO {T} (id, {_INSERT_COLUMNS}) OVERRIDING SYSTEM VALUE
SELECT win.job_id, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s,
       COALESCE(%s::timestamptz, now() + %s * interval '1 second')
FROM win
{_ON_CONFLICT_UNIQUE}
RETURNING {_RETURN_COLUMNS}, {{ring}}
"""

# Debounce: while the key has an open job (PENDING, never claimed: the partial unique index
# pgjobs_job_debounce_open), an enqueue replaces its config and pushes it back, never past
# created_at + max wait (LEAST skips a NULL: no max wait). A claim that holds the open job
# makes the enqueue wait for it, then insert a new open job: no enqueue is lost.
_DEBOUNCE_COLUMNS = (
    "type, queue, priority, config, trace_id, tenant_id, operated_by, max_attempts, "
    "debounce_key, flow_key, run_after"
)
_INSERT_DEBOUNCED = f"""
INSERT INTO {T} AS j ({_DEBOUNCE_COLUMNS})
VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s,
        LEAST(now() + %s::float8 * interval '1 second', now() + %s::float8 * interval '1 second'))
ON CONFLICT (type, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = {PENDING_SQL} AND history = '[]'::jsonb
DO UPDATE SET config = EXCLUDED.config,
              run_after = LEAST(now() + %s::float8 * interval '1 second',
                                j.created_at + %s::float8 * interval '1 second'),
              updated_at = now()
RETURNING {_RETURN_COLUMNS}, j.xmax = 0, j.queue, j.priority, j.trace_id, j.tenant_id,
          j.operated_by, j.max_attempts, {{ring}}
"""


@functools.cache
def insert_windowed_sql(channel: str) -> str:
    return _INSERT_WINDOWED.format(ring=doorbell.ring_sql(channel, "run_after <= now()", "queue"))


@functools.cache
def insert_debounced_sql(channel: str) -> str:
    return _INSERT_DEBOUNCED.format(
        ring=doorbell.ring_sql(channel, "j.run_after <= now()", "j.queue")
    )


def _job_params(job: NewJob) -> tuple[Any, ...]:
    return (
        job.type,
        job.queue,
        job.priority,
        job.config_json,
        job.trace_id,
        job.tenant_id,
        job.operated_by,
        job.max_attempts,
    )


def insert_windowed(
    job: NewJob, unique_for: float, using: str | None = None
) -> tuple[int, datetime, datetime] | None:
    """Insert one job holding ``job.unique_key`` for ``unique_for`` seconds from now (and while
    it is active); returns (id, run_after, created_at), None when the key is taken."""
    channel = conf.get("NOTIFY_CHANNEL")
    key = job.unique_key
    params = (
        key,
        unique_for,
        key,
        *_job_params(job),
        key,
        job.flow_key,
        job.run_at,
        job.delay,
        channel,
    )
    row = db.fetchone_prepared(using, insert_windowed_sql(channel), params)
    return None if row is None else row[:3]


def insert_debounced(
    job: NewJob, debounce: float, max_wait: float | None, using: str | None = None
) -> tuple[Any, ...]:
    """Insert a debounced job, or merge it into its key's open job. Returns (id, run_after,
    created_at, inserted, queue, priority, trace_id, tenant_id, operated_by, max_attempts) of
    the job that will run this config."""
    channel = conf.get("NOTIFY_CHANNEL")
    params = (
        *_job_params(job),
        job.debounce_key,
        job.flow_key,
        debounce,
        max_wait,
        debounce,
        max_wait,
        channel,
    )
    row = db.fetchone_prepared(using, insert_debounced_sql(channel), params)
    return tuple(row[:10])


def find_active_by_unique_key(unique_key: str, using: str | None = None) -> int | None:
    with db.cursor(using) as cur:
        cur.execute(
            f"SELECT id FROM {T} WHERE unique_key = %s AND status IN {ACTIVE_SQL}",
            [unique_key],
        )
        row = cur.fetchone()
    return None if row is None else row[0]


_INSERT_MANY = f"""
WITH ins AS (
    INSERT INTO {T} ({_INSERT_COLUMNS})
    SELECT %s, %s, %s, c.value, %s, %s, %s, %s, NULL,
           COALESCE(%s::text, c.value #>> %s::text[]),
           COALESCE(%s::timestamptz, now() + %s * interval '1 second')
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS c(value, n)
    ORDER BY c.n
    RETURNING id, run_after, queue
), wake AS (
    SELECT {{ring}} FROM (SELECT queue FROM ins WHERE run_after <= now() LIMIT 1) due
)
SELECT id, (SELECT count(*) FROM wake) FROM ins ORDER BY id
"""


@functools.cache
def _insert_many_sql(channel: str) -> str:
    return _INSERT_MANY.format(ring=doorbell.ring_sql(channel, "true", "due.queue"))


INSERT_MANY_CHUNK = 5000  # configs per INSERT


def insert_many(
    job: NewJob,
    config_arrays: Sequence[str],
    using: str | None = None,
    key_path: Sequence[str] | None = None,
) -> list[int]:
    """Insert many jobs sharing every option but the config, one statement per JSON array of
    configs (enqueue_many cuts them INSERT_MANY_CHUNK long); returns the ids in order. Without
    ``job.flow_key``, each job's flow key is its config's ``key_path`` (checked by the caller)."""
    ids: list[int] = []
    with db.cursor(using) as cur:
        for array in config_arrays:
            cur.execute(
                _insert_many_sql(conf.get("NOTIFY_CHANNEL")),
                (
                    job.type,
                    job.queue,
                    job.priority,
                    job.trace_id,
                    job.tenant_id,
                    job.operated_by,
                    job.max_attempts,
                    job.flow_key,
                    list(key_path) if key_path and job.flow_key is None else None,
                    job.run_at,
                    job.delay,
                    array,
                    conf.get("NOTIFY_CHANNEL"),
                ),
            )
            ids.extend(r[0] for r in cur.fetchall())
    return ids


# A workflow's jobs (workflows.py), many types and options in one statement per chunk: a step
# with dependencies starts WAITING, counting them in deps_open; the others PENDING (doorbell).
_INSERT_WORKFLOW = f"""
WITH ins AS (
    INSERT INTO {T} ({_INSERT_COLUMNS}, status, workflow_id, step, deps_open, has_dependants)
    SELECT r.type, r.queue, r.priority, r.config, %(trace_id)s, %(tenant_id)s, %(operated_by)s,
           r.max_attempts, NULL, NULL, now() + r.delay * interval '1 second',
           CASE WHEN r.deps > 0 THEN {WAITING_SQL} ELSE {PENDING_SQL} END,
           %(workflow_id)s, r.step, r.deps, r.dependants
    FROM ROWS FROM (
        jsonb_array_elements(%(configs)s::jsonb), unnest(%(types)s::text[]),
        unnest(%(queues)s::text[]), unnest(%(priorities)s::smallint[]),
        unnest(%(max_attempts)s::int[]), unnest(%(steps)s::text[]), unnest(%(deps)s::int[]),
        unnest(%(dependants)s::boolean[]), unnest(%(delays)s::float8[])
    ) WITH ORDINALITY AS r(config, type, queue, priority, max_attempts, step, deps, dependants,
                           delay, n)
    ORDER BY r.n
    RETURNING id, run_after, queue, status
), wake AS (
    SELECT {{ring}} FROM (SELECT DISTINCT queue FROM ins
                         WHERE status = {PENDING_SQL} AND run_after <= now()) due
)
SELECT id, (SELECT count(*) FROM wake) FROM ins ORDER BY id
"""


@dataclass(slots=True)
class WorkflowJobs:
    """One chunk of a workflow's jobs, column by column: configs as one JSON array's text, the
    other columns as array literals (``{a,b}``; workflows.py writes them without per-element
    adaptation)."""

    configs: str
    types: str
    queues: str
    priorities: str
    max_attempts: str
    steps: str
    deps: str
    dependants: str
    delays: str


@functools.cache
def _insert_workflow_sql(channel: str) -> str:
    return _INSERT_WORKFLOW.format(
        ring=doorbell.ring_sql(channel, "true", "due.queue", "%(channel)s")
    )


def insert_workflow_jobs(
    workflow_id: int,
    jobs: WorkflowJobs,
    *,
    trace_id: str | None,
    tenant_id: str | None,
    operated_by: str | None,
    using: str | None = None,
) -> list[int]:
    """Insert one chunk of a workflow's jobs (workflows.py); returns their ids in order."""
    channel = conf.get("NOTIFY_CHANNEL")
    with db.cursor(using) as cur:
        cur.execute(
            _insert_workflow_sql(channel),
            {
                "configs": jobs.configs,
                "types": jobs.types,
                "queues": jobs.queues,
                "priorities": jobs.priorities,
                "max_attempts": jobs.max_attempts,
                "steps": jobs.steps,
                "deps": jobs.deps,
                "dependants": jobs.dependants,
                "delays": jobs.delays,
                "workflow_id": workflow_id,
                "trace_id": trace_id,
                "tenant_id": tenant_id,
                "operated_by": operated_by,
                "channel": channel,
            },
        )
        return [r[0] for r in cur.fetchall()]


# --- claim -------------------------------------------------------------------------------------

# Every claim is built from two named parts: _claimable(), which jobs a claim may take, and
# _CLAIMED, the UPDATE that makes the rows locked in `picked` RUNNING under a fresh lease.
# started_at is clock_timestamp(): read once the row is locked, so after the enqueue that wrote
# it (created_at), even inside one transaction (a TestCase), where now() stands still.
_CLAIMED = f"""
UPDATE {T} j
SET status = {RUNNING_SQL},
    attempts = j.attempts + 1,
    locked_by = %(worker)s,
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + %(lease)s * interval '1 second',
    started_at = clock_timestamp(),
    finished_at = NULL,
    progress = NULL,
    updated_at = now()
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.type, j.queue, j.priority, j.config::text, j.attempts, j.max_attempts,
          j.trace_id, j.tenant_id, j.lease_token::text, j.created_at, j.cancel_requested,
          j.flow_key, j.has_dependants
"""


def _claimable(j: str = "", types: str = "types") -> str:
    """The WHERE of every unlimited claim: due PENDING jobs of our types and queues, outside
    the paused and controlled queues (a control on the queue's row, or declared in
    PGJOBS["QUEUES"]: the parameter ``controlled``, inside the hashed subplan, which keeps the
    plan on the claim index); ``j`` qualifies the columns ("j." where others are in scope),
    ``types`` names the parameter of the types."""
    return f"""{j}status = {PENDING_SQL} AND {j}run_after <= now()
      AND {j}type = ANY(%({types})s::text[])
      AND (%(all_queues)s OR {j}queue = ANY(%(queues)s::text[]))
      AND {j}queue NOT IN (SELECT name FROM {QUEUE_TABLE}
                        WHERE paused OR concurrency_limit IS NOT NULL
                           OR per_key_limit IS NOT NULL OR rate IS NOT NULL
                        UNION ALL SELECT unnest(%(controlled)s::text[]))"""


# The lock is taken in a MATERIALIZED CTE so that LIMIT is applied exactly once:
# `UPDATE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)` may re-run the subquery
# and claim more than n rows (PostgreSQL bug #15715).
# Queues that are paused or have a concurrency limit (rows of pgjobs_queue) are left to
# claim_limited(); the test reads the table in the same statement, so a pause is never missed.
# `NOT IN (SELECT …)` on purpose: a hashed subplan keeps the row estimate, so the claim walks
# its index and stops after LIMIT rows (`<> ALL(ARRAY(…))` led to a scan and sort of every
# pending job; docs/performance.md). tests/integration/test_guards.py checks the plan.
# Two lines, each with its own limit: the types run on threads and those of ``async def``
# handlers (worker/aio.py); a line with no room has LIMIT 0 and reads nothing.
_CLAIM = f"""
WITH threads AS MATERIALIZED (
    SELECT id FROM {T}
    WHERE {_claimable()}
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), coroutines AS MATERIALIZED (
    SELECT id FROM {T}
    WHERE {_claimable(types="async_types")}
    ORDER BY priority DESC, run_after, id
    LIMIT %(async_limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (SELECT id FROM threads UNION ALL SELECT id FROM coroutines)
{_CLAIMED}"""

# Fair share: the same claim, but round-robin over tenants. A loose index scan finds the
# tenants with due work (starting after the tenant the previous claim of this worker ended on,
# so that every tenant gets its turn), takes the head of each tenant's line, then orders
# by rank within the tenant: first job of every tenant, then the second, ... Jobs without a
# tenant form one more line. Still one statement, still SKIP LOCKED.
_CLAIM_FAIR = f"""
WITH RECURSIVE tenants AS (
    (SELECT tenant_id FROM {T}
     WHERE tenant_id > %(after)s AND {_claimable()}
     ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tenant_id FROM {T} j
            WHERE j.tenant_id > t.tenant_id AND {_claimable("j.")}
            ORDER BY j.tenant_id LIMIT 1)
    FROM tenants t WHERE t.tenant_id IS NOT NULL
), lines AS (
    SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL LIMIT %(limit)s
), heads AS (
    SELECT h.id, h.tenant_id, h.rank FROM lines l CROSS JOIN LATERAL (
        SELECT id, tenant_id,
               row_number() OVER (ORDER BY priority DESC, run_after, id) AS rank
        FROM (SELECT id, tenant_id, priority, run_after FROM {T}
              WHERE tenant_id = l.tenant_id AND {_claimable()}
              ORDER BY priority DESC, run_after, id LIMIT %(limit)s) x
    ) h
    UNION ALL
    SELECT id, NULL, row_number() OVER (ORDER BY priority DESC, run_after, id)
    FROM (SELECT id, priority, run_after FROM {T}
          WHERE tenant_id IS NULL AND {_claimable()}
          ORDER BY priority DESC, run_after, id LIMIT %(limit)s) n
), picked AS MATERIALIZED (
    SELECT j.id FROM heads h JOIN {T} j ON j.id = h.id
    WHERE j.status = {PENDING_SQL}
    ORDER BY h.rank, h.tenant_id NULLS LAST
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
)
{_CLAIMED}"""

# --- the controlled claim (docs/flow-control.md) ------------------------------------------------

# A controlled queue's controls: the pgjobs_queue row's values win over those declared in
# PGJOBS["QUEUES"] (the parameters). Always one row; a paused queue claims nothing. The buckets
# read the clock once the queue's lock is held (``t``): now() would be the time before the wait.
CONTROLS = f"""
    SELECT COALESCE(q.paused, false) AS paused,
           COALESCE(q.concurrency_limit, %(cap)s::int) AS cap,
           COALESCE(q.per_key_limit, %(per_key)s::int) AS per_key,
           COALESCE(q.rate, %(rate)s::float8) AS rate,
           COALESCE(q.burst, %(burst)s::int, 1) AS burst,
           COALESCE(q.rate_per_key, %(by_key)s::bool, false) AS by_key,
           clock_timestamp() AS t
    FROM (SELECT 1) one LEFT JOIN {QUEUE_TABLE} q ON q.name = %(queue)s"""


def tokens_sql(tat: str) -> str:
    """SQL of the starts a GCRA bucket allows now: ``burst`` when its theoretical arrival time
    ``tat`` is past (or NULL), one fewer per 1/rate seconds it lies ahead."""
    return (
        f"GREATEST(0, floor(c.burst - GREATEST(0, extract(epoch FROM {tat} - c.t)) * c.rate"
        " + 1e-9))::int"
    )


def _due(j: str = "") -> str:
    """Due PENDING jobs of the queue being claimed, of our types."""
    return f"""{j}status = {PENDING_SQL} AND {j}queue = %(queue)s AND {j}run_after <= now()
      AND {j}type = ANY(%(types)s::text[])"""


# Run after the queue's pg_advisory_xact_lock, as a statement of its own (its snapshot then
# sees every earlier claimer's jobs): the counts and token rows cannot go stale. `room` is what
# the queue allows (free threads, cap - RUNNING, queue-wide tokens); `keys` a loose index scan
# over the flow keys with due work, after the worker's cursor, read lazily until `room` keys can
# take a job (per key: per_key - its RUNNING, its own tokens); each key's head lines up by
# rank, keyless jobs as one more line (in a queue with a key path only older jobs lack one:
# that line looks at the first KEYLESS_SCAN due jobs, never a throttled backlog); SKIP LOCKED;
# `spent` moves the buckets' arrival times.
KEYLESS_SCAN = 100
# Several controlled queues claimed in one transaction share one limit: each claim counts its
# rows in a transaction-local setting (set_config(..., true)), the next claims what is left.
_TAKEN_NAME = "pgjobs.claimed"
_TAKEN = f"COALESCE(NULLIF(current_setting('{_TAKEN_NAME}', true), '')::int, 0)"
_KEY_TAT = f"(SELECT b.tat FROM {RATE_TABLE} b WHERE b.queue = %(queue)s AND b.key = k.k)"
_SHARE_PASS = f"(SELECT s.pass FROM {SHARE_TABLE} s WHERE s.queue = %(queue)s AND s.tenant = k.k)"
_KEYLESS_RANK = "row_number() OVER (ORDER BY y.priority DESC, y.run_after, y.id)"
_WEIGHT = "COALESCE((%(weights)s::jsonb ->> k.k)::float8, %(weight)s::float8)"


# The parts the claim of a queue with fair-share weights adds (stride scheduling, see
# _claim_controlled_sql); the plain controlled claim has none of them.
_FAIR_PARTS = {
    "vt": f"""
), vt AS (
    SELECT COALESCE((SELECT s.pass FROM {SHARE_TABLE} s
                     WHERE s.queue = %(queue)s AND s.tenant = ''), 0) AS v""",
    "line_cols": ", l.w, l.p",
    "line_vals": f""",
            {_WEIGHT} AS w,
            GREATEST({_SHARE_PASS}, (SELECT v FROM vt)) AS p""",
    "line_order": "ORDER BY l.p, l.k\n    ",
    "key_vp": ", l.p + (h.rank - 1) / l.w AS vp",
    "keyless_vp": f", (SELECT v FROM vt) + ({_KEYLESS_RANK} - 1) / %(weight)s::float8",
    "picked_vp": ", c.vp",
    "pick_order": "c.vp, ",
    "shared": f"""
), shared AS (
    INSERT INTO {SHARE_TABLE} AS s (queue, tenant, pass)
    SELECT %(queue)s, t.k, t.p FROM (
        SELECT l.k, l.p + count(*) / l.w AS p
        FROM picked p JOIN lines l ON l.k = p.k GROUP BY l.k, l.p, l.w
        UNION ALL
        SELECT '', max(p.vp) FROM picked p HAVING count(*) > 0
    ) t
    ON CONFLICT (queue, tenant) DO UPDATE
    SET pass = CASE WHEN s.tenant = '' THEN GREATEST(s.pass, EXCLUDED.pass)
                    ELSE EXCLUDED.pass END""",
}


def _claim_controlled_sql(fair: bool) -> str:
    """The controlled claim; ``fair``: of a queue with fair-share weights. There the keys line
    up by pass, floored at the queue's virtual time `vt` (the last start served: a key back
    from idle gets no burst), the room goes to the smallest virtual starts (pass + (rank - 1)
    / weight) and `shared` adds taken / weight to each key's pass, moving `vt` up."""
    p = _FAIR_PARTS if fair else dict.fromkeys(_FAIR_PARTS, "")
    vt, line_cols, line_vals, line_order = p["vt"], p["line_cols"], p["line_vals"], p["line_order"]
    key_vp, keyless_vp, picked_vp, pick_order = (
        p["key_vp"],
        p["keyless_vp"],
        p["picked_vp"],
        p["pick_order"],
    )
    shared = p["shared"]
    return f"""
WITH RECURSIVE ctl AS ({CONTROLS}
), room AS (
    SELECT CASE WHEN c.paused THEN 0 ELSE GREATEST(0, LEAST(
               %(limit)s::int - {_TAKEN},
               c.cap - (SELECT count(*) FROM {T} r
                        WHERE r.status = {RUNNING_SQL} AND r.queue = %(queue)s),
               CASE WHEN c.rate IS NOT NULL AND NOT c.by_key THEN {tokens_sql("b.tat")} END))
           END AS n,
           CASE WHEN c.rate IS NOT NULL AND c.by_key THEN {tokens_sql("b.tat")} END AS keyless
    FROM ctl c LEFT JOIN {RATE_TABLE} b ON b.queue = %(queue)s AND b.key = ''{vt}
), keys(k) AS (  -- the keys after the cursor; none left: from the first key again
    SELECT COALESCE(
        (SELECT flow_key FROM {T}
         WHERE {_due()} AND flow_key IS NOT NULL AND flow_key > %(after)s
         ORDER BY flow_key LIMIT 1),
        (SELECT flow_key FROM {T}
         WHERE {_due()} AND flow_key IS NOT NULL AND %(after)s <> ''
         ORDER BY flow_key LIMIT 1))
    UNION ALL
    SELECT (SELECT j.flow_key FROM {T} j
            WHERE {_due("j.")} AND j.flow_key IS NOT NULL AND j.flow_key > keys.k
            ORDER BY j.flow_key LIMIT 1)
    FROM keys WHERE keys.k IS NOT NULL
), lines AS (
    SELECT l.k, l.n{line_cols} FROM (
        SELECT k.k, LEAST(
            (SELECT n FROM room),
            c.per_key - (SELECT count(*) FROM {T} r
                         WHERE r.status = {RUNNING_SQL} AND r.flow_key IS NOT NULL
                           AND r.queue = %(queue)s AND r.flow_key = k.k),
            CASE WHEN c.rate IS NOT NULL AND c.by_key THEN {tokens_sql(_KEY_TAT)} END) AS n{line_vals}
        FROM keys k CROSS JOIN ctl c WHERE k.k IS NOT NULL
    ) l
    WHERE l.n > 0
    {line_order}LIMIT (SELECT n FROM room)
), cand AS (
    SELECT h.id, l.k, h.rank, h.priority, h.run_after{key_vp} FROM lines l CROSS JOIN LATERAL (
        SELECT x.id, x.priority, x.run_after,
               row_number() OVER (ORDER BY x.priority DESC, x.run_after, x.id) AS rank
        FROM (SELECT id, priority, run_after FROM {T}
              WHERE {_due()} AND flow_key IS NOT NULL AND flow_key = l.k
              ORDER BY priority DESC, run_after, id LIMIT l.n) x
    ) h
    UNION ALL
    SELECT y.id, NULL, {_KEYLESS_RANK},
           y.priority, y.run_after{keyless_vp}
    FROM (SELECT x.id, x.priority, x.run_after
          FROM (SELECT id, priority, run_after, flow_key FROM {T} WHERE {_due()}
                ORDER BY priority DESC, run_after, id LIMIT %(keyless_scan)s) x
          WHERE x.flow_key IS NULL
          LIMIT (SELECT LEAST(n, keyless) FROM room)) y
), picked AS MATERIALIZED (
    SELECT j.id, c.k{picked_vp} FROM cand c JOIN {T} j ON j.id = c.id
    WHERE j.status = {PENDING_SQL}
    ORDER BY {pick_order}c.rank, c.priority DESC, c.run_after, c.id
    LIMIT (SELECT n FROM room)
    FOR UPDATE OF j SKIP LOCKED
), spent AS (
    INSERT INTO {RATE_TABLE} AS b (queue, key, tat)
    SELECT %(queue)s, s.k, c.t + s.n / c.rate * interval '1 second'
    FROM (SELECT CASE WHEN (SELECT by_key FROM ctl) THEN COALESCE(p.k, '') ELSE '' END AS k,
                 count(*) AS n
          FROM picked p GROUP BY 1) s CROSS JOIN ctl c
    WHERE c.rate IS NOT NULL
    ON CONFLICT (queue, key) DO UPDATE
    SET tat = GREATEST(b.tat, (SELECT t FROM ctl)) + (EXCLUDED.tat - (SELECT t FROM ctl)){shared}
)
{_CLAIMED},
          set_config('{_TAKEN_NAME}', ({_TAKEN} + 1)::text, true)"""


_CLAIM_CONTROLLED = _claim_controlled_sql(fair=False)
_CLAIM_SHARED = _claim_controlled_sql(fair=True)

# Prepared, the controlled claim would get a generic plan after five executions (its LIMITs
# are subqueries, so that plan looks no dearer); one made from the statistics of an empty table
# scans the table whole once it has grown. Custom plans, then, until use_generic_plans() says
# the statistics describe enough rows (db.generic_plans_on).
_CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"

# Serialises the claims of one queue (every statement after it sees the earlier claims' jobs).
_QUEUE_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))"

# When the next start of a rate-held queue is allowed: the earliest bucket that has none now
# and due jobs it holds back (none: nothing is held, an idle or burst worker need not wait).
_NEXT_START = f"""
WITH ctl AS ({CONTROLS})
SELECT min(extract(epoch FROM b.tat - c.t) - (c.burst - 1) / c.rate)
FROM ctl c JOIN {RATE_TABLE} b ON b.queue = %(queue)s
WHERE c.rate IS NOT NULL AND NOT c.paused
  AND b.tat > c.t + (c.burst - 1) / c.rate * interval '1 second'
  AND EXISTS (SELECT 1 FROM {T} j WHERE {_due("j.")}
              AND (NOT c.by_key OR j.flow_key = b.key OR (b.key = '' AND j.flow_key IS NULL)))
"""


@dataclass(slots=True)
class ClaimedRow:
    id: int
    type: str
    queue: str
    priority: int
    config: dict[str, Any]
    attempts: int
    max_attempts: int
    trace_id: str | None
    tenant_id: str | None
    lease_token: str  # as text: it only travels back to the database
    created_at: datetime
    cancel_requested: bool
    config_error: str | None = None  # the stored config cannot be decoded: fail, never run
    flow_key: str | None = None
    has_dependants: bool = True  # when claimed: its finalize needs the fan-in


def _rows(cur: Any) -> list[ClaimedRow]:
    claimed = []
    for r in cur.fetchall():
        config, config_error = decode_config(r[4])
        claimed.append(
            ClaimedRow(
                r[0],
                r[1],
                r[2],
                r[3],
                config,
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                r[10],
                r[11],
                config_error,
                r[12],
                r[13],
            )
        )
    claimed.sort(key=lambda c: (-c.priority, c.id))
    return claimed


def claim(
    *,
    worker_id: str,
    types: Sequence[str],
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
    fair: bool = False,
    after_tenant: str | None = None,
    async_types: Sequence[str] = (),
    async_limit: int = 0,
    using: str | None = None,
) -> list[ClaimedRow]:
    """Lock up to ``limit`` due jobs of ``types`` and ``async_limit`` of ``async_types`` and
    make them RUNNING under a fresh lease, in one statement.

    Jobs of paused or concurrency-limited queues are not taken here (see claim_limited).
    With ``fair``, tenants are interleaved, starting after ``after_tenant`` (the two lines
    share one limit there).
    """
    if not _claims(types, limit, async_types, async_limit):
        return []
    params = _claim_params(
        worker_id=worker_id,
        types=types,
        queues=queues,
        limit=limit,
        lease_seconds=lease_seconds,
        after_tenant=after_tenant,
        async_types=async_types,
        async_limit=async_limit,
        fair=fair,
    )
    if fair:  # not prepared: its generic plan is not checked (loose index scan per tenant)
        with db.cursor(using) as cur:
            cur.execute(_CLAIM_FAIR, params)
            return _rows(cur)
    cur = db.prepared_cursor(using)
    cur.execute(_CLAIM, params)
    return _rows(cur)


def _claims(types: Sequence[str], limit: int, async_types: Sequence[str], async_limit: int) -> bool:
    return (limit > 0 and bool(types)) or (async_limit > 0 and bool(async_types))


def _claim_params(
    *,
    worker_id: str,
    types: Sequence[str],
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
    after_tenant: str | None = None,
    async_types: Sequence[str] = (),
    async_limit: int = 0,
    fair: bool = False,
) -> dict[str, Any]:
    if fair:  # one line of both kinds
        types, limit = [*types, *async_types], limit + async_limit
        async_types, async_limit = (), 0
    return {
        "types": list(types),
        "async_types": list(async_types),
        "async_limit": max(0, async_limit) if async_types else 0,
        "all_queues": queues is None,
        "queues": list(queues or []),
        "limit": max(0, limit) if types else 0,
        "worker": worker_id,
        "lease": lease_seconds,
        "after": after_tenant or "",
        "controlled": list(flow.controlled_queues()),
    }


@dataclass(slots=True)
class ControlledClaim:
    rows: list[ClaimedRow]
    next_start_in: float | None  # seconds until a held rate allows a start; None: not held


@dataclass(frozen=True, slots=True)
class ControlledQueue:
    """A controlled queue to claim from: its name, its declared controls (PGJOBS["QUEUES"];
    the queue's row overrides them) and the key its last full claim ended on."""

    name: str
    controls: flow.FlowSettings
    after_key: str | None = None


def claim_controlled(
    *,
    queue: str,
    controls: flow.FlowSettings,
    worker_id: str,
    types: Sequence[str],
    limit: int,
    lease_seconds: float,
    after_key: str | None = None,
    using: str | None = None,
) -> ControlledClaim:
    """Claim up to ``limit`` jobs of one controlled queue, never above its cap, per-key limit
    or rate (finalize_and_claim_controlled with one queue and nothing to write)."""
    _, (got,) = finalize_and_claim_controlled(
        [],
        [ControlledQueue(queue, controls, after_key)],
        worker_id=worker_id,
        types=types,
        limit=limit,
        lease_seconds=lease_seconds,
        using=using,
    )
    return got


def finalize_and_claim_controlled(
    completions: Sequence[Completion],
    queues: Sequence[ControlledQueue],
    *,
    worker_id: str,
    types: Sequence[str],
    limit: int,
    lease_seconds: float,
    using: str | None = None,
) -> tuple[set[int], list[ControlledClaim]]:
    """Write ``completions`` (the finalize, lease-fenced, with its fan-in), then claim up to
    ``limit`` jobs from ``queues`` (a ControlledClaim each, in their order), in one round trip
    and one transaction: per queue, in name order, its advisory lock as a statement of its
    own (held to the transaction's end, so the claim's snapshot sees every earlier claimer's
    jobs), its claim (what the queues before it left of ``limit``) and its next start."""
    if limit <= 0 or not types or not queues:
        return finalize(completions, using=using), [ControlledClaim([], None) for _ in queues]
    alias = using or conf.get("DATABASE")
    order = sorted(range(len(queues)), key=lambda i: queues[i].name)
    params = [_controlled_params(queues[i], worker_id, types, limit, lease_seconds) for i in order]
    if db.prepares(connections[alias]) and db.PIPELINE:
        written, got = _controlled_pipelined(completions, params, alias)
    elif db.server_side_binding(alias):  # one statement per query: finalize, then a transaction
        written = finalize(completions, using=alias)
        with transaction.atomic(using=alias), db.cursor(alias) as cur:
            got = [_controlled_one(cur, p) for p in params]
    else:  # one multi-statement query: one implicit transaction
        written, got = _controlled_simple(completions, params, alias)
    claims: list[ControlledClaim] = [ControlledClaim([], None)] * len(queues)
    for i, (rows, wait) in zip(order, got, strict=True):
        held = wait is not None and len(rows) < limit
        claims[i] = ControlledClaim(rows, max(0.0, float(wait)) if held else None)
    return written, claims


def _controlled_params(
    q: ControlledQueue, worker_id: str, types: Sequence[str], limit: int, lease_seconds: float
) -> dict[str, Any]:
    c = q.controls
    return {
        "queue": q.name,
        "types": list(types),
        "limit": limit,
        "worker": worker_id,
        "lease": lease_seconds,
        "cap": c.concurrency,
        "per_key": c.per_key,
        "rate": c.rate,
        "burst": c.burst,
        "by_key": c.rate_per_key,
        "after": "" if c.fair else q.after_key or "",  # fair: every key lines up by pass
        "lock": f"pgjobs.queue:{q.name}",
        "keyless_scan": KEYLESS_SCAN if c.key else None,
        "weights": json.dumps(c.fair_weights),
        "weight": c.default_weight,
        "fair": c.fair is not None,
    }


def _claim_sql(params: dict[str, Any]) -> str:
    """The claim of a queue with fair-share weights, or the plain controlled claim."""
    return _CLAIM_SHARED if params["fair"] else _CLAIM_CONTROLLED


Got = tuple[list[ClaimedRow], Any]  # a queue's claimed rows and its next start (seconds)


def _controlled_one(cur: Any, params: dict[str, Any]) -> Got:
    """A queue's lock, claim and next start, a statement each, in the caller's transaction."""
    cur.execute(_QUEUE_LOCK, params)
    cur.execute(_claim_sql(params), params)
    rows = _rows(cur)
    cur.execute(_NEXT_START, params)
    return rows, cur.fetchone()[0]


def _controlled_pipelined(
    completions: Sequence[Completion], params: list[dict[str, Any]], alias: str
) -> tuple[set[int], list[Got]]:
    """finalize_and_claim_controlled prepared, in one pipeline: one Sync at its end makes its
    statements one transaction (the locks held to it); results are read after the Sync."""
    conn = connections[alias]
    n = len(params)
    fin = db.prepared_cursor(alias, 0)
    lock = db.prepared_cursor(alias, 1)  # its rows are never read: one cursor for every lock
    claims = [db.prepared_cursor(alias, 2 + 2 * k) for k in range(n)]
    starts = [db.prepared_cursor(alias, 3 + 2 * k) for k in range(n)]
    with db.pipeline(conn):
        if completions:
            fin.execute(finalize_sql(completions), _finalize_params(completions))
        if not db.generic_plans_on(alias):
            lock.execute(_CUSTOM_PLANS)
        for p, claim_cur, start_cur in zip(params, claims, starts, strict=True):
            lock.execute(_QUEUE_LOCK, p)
            claim_cur.execute(_claim_sql(p), p)
            start_cur.execute(_NEXT_START, p)
    written = _written(fin.fetchall(), completions, alias) if completions else set()
    got = [(_rows(c), s.fetchone()[0]) for c, s in zip(claims, starts, strict=True)]
    return written, got


def _controlled_simple(
    completions: Sequence[Completion], params: list[dict[str, Any]], alias: str
) -> tuple[set[int], list[Got]]:
    """finalize_and_claim_controlled as one multi-statement query (each statement bound on
    the client), one implicit transaction: the locks are held to its end."""
    with db.cursor(alias) as cur:
        fin = finalize_sql(completions)
        parts = [cur.mogrify(fin, _finalize_params(completions))] if completions else []
        for p in params:
            parts += [cur.mogrify(q, p) for q in (_QUEUE_LOCK, _claim_sql(p), _NEXT_START)]
        cur.execute(";\n".join(parts))
        finalized: list[tuple[Any, ...]] = []
        if completions:
            finalized = cur.fetchall()
            cur.nextset()
        got = []
        for _ in params:
            cur.nextset()  # past the lock's row
            rows = _rows(cur)
            cur.nextset()
            got.append((rows, cur.fetchone()[0]))
            cur.nextset()
    return _written(
        finalized, completions, alias
    ), got  # every result read: the fan-in's next query may run


def claim_limited(
    *,
    queue: str,
    worker_id: str,
    types: Sequence[str],
    limit: int,
    lease_seconds: float,
    using: str | None = None,
) -> list[ClaimedRow]:
    """Claim from one queue that has a cluster-wide concurrency limit on its row."""
    return claim_controlled(
        queue=queue,
        controls=flow.FlowSettings(),
        worker_id=worker_id,
        types=types,
        limit=limit,
        lease_seconds=lease_seconds,
        using=using,
    ).rows


# --- history --------------------------------------------------------------------------------


# A job's history is a JSON array of entries, one per attempt that did not end the job and per
# operator action; every entry is built here (values are SQL expressions, keys in the order given).
HISTORY_ERROR_CHARS = 2000  # an entry keeps a prefix of the error; the row's `error` holds it all


def history_entry(**fields: str) -> str:
    """SQL of one history entry: jsonb_build_object('key', <SQL value>, ...)."""
    return "jsonb_build_object(" + ", ".join(f"'{k}', {v}" for k, v in fields.items()) + ")"


def history_appended(entry: str, history: str = "j.history") -> str:
    """SQL of ``history`` with ``entry`` appended."""
    return f"{history} || jsonb_build_array({entry})"


def _history_entry(outcome: str, error: str, duration_ms: str | None = None) -> str:
    """SQL appending one attempt to ``j.history``: attempt, worker, start, (duration), error and
    outcome: the entry of the finalize, the release and the reaper."""
    duration = {"duration_ms": duration_ms} if duration_ms else {}
    return history_appended(
        history_entry(
            attempt="j.attempts",
            worker="j.locked_by",
            started_at="j.started_at",
            **duration,
            error=error,
            outcome=outcome,
        )
    )


_HISTORY_FINISHED = _history_entry(
    "COALESCE(v.note, v.status)", f"left(v.error, {HISTORY_ERROR_CHARS})", "v.duration_ms"
)
_HISTORY_RELEASED = _history_entry("'released'", "%s::text")
_HISTORY_REAPED = _history_entry("'lease_expired'", "'lease expired'")

# --- finalize ----------------------------------------------------------------------------------

# A progress record (progress.record: done, total, note, age in seconds) as stored: "at" on the
# database clock, so that it compares with started_at.
_PROGRESS_VALUE = (
    "(v.progress - 'age') || jsonb_build_object("
    "'at', now() - (v.progress ->> 'age')::float8 * interval '1 second')"
)

# --- fan-in (workflows.py) ----------------------------------------------------------------------

# The CTEs every statement that ends jobs carries after its own CTE `ended` (id, status, step of
# the jobs it ended that have dependants): each open edge of those jobs is resolved once (the
# `outcome IS NULL` test, re-checked on the latest row version, makes a duplicate finalize, a
# stale one or a second resolver count nothing), the children are locked in id order (two
# finalizes never deadlock on them), and each child's counter is decremented on its locked row;
# at zero, in the same UPDATE, it becomes PENDING or CANCELLED by its edges' mode and the
# workflow's on_failure. Never decided by counting siblings: two last members finishing at once
# would each see the other RUNNING in their snapshot. With no row in `ended` (a plain job) the
# edges' index scan, inside a nested loop over `ended`, never runs: pgjobs_dependency is not
# read (tests/integration/test_workflow_fan_in.py checks the plan). `cascade`: the children this
# statement cancelled that have dependants of their own, resolved by the caller's next
# statement (resolve_ended); `wake`: the doorbell, for the children it made PENDING.
_FAN_IN = f"""
resolved AS (
    UPDATE {DEPENDENCY_TABLE} d SET outcome = e.status
    FROM ended e
    WHERE d.parent_id = e.id AND d.outcome IS NULL
    RETURNING d.child_id, d.mode, d.outcome,
              COALESCE(e.step, '?') || ' (job ' || e.id || ')' AS parent
), tally AS (
    SELECT child_id, count(*) AS n, count(*) FILTER (WHERE outcome IN {FAILURE_SQL}) AS failed,
           min(mode) AS mode, min(parent) FILTER (WHERE outcome IN {FAILURE_SQL}) AS culprit
    FROM resolved GROUP BY child_id
), locked AS (
    SELECT c.id, c.status AS was, c.deps_open - t.n AS open, c.deps_failed, t.failed,
           t.mode, t.culprit, COALESCE(w.on_failure, 'cancel') AS policy
    FROM tally t JOIN {T} c ON c.id = t.child_id
    LEFT JOIN {WORKFLOW_TABLE} w ON w.id = c.workflow_id
    WHERE c.id = ANY(ARRAY(SELECT child_id FROM tally))
    ORDER BY c.id
    FOR UPDATE OF c
), counted AS (
    SELECT id, was, open, mode, culprit, policy,
           CASE WHEN policy = 'ignore' THEN 0 ELSE failed END AS newly_failed,
           deps_failed + CASE WHEN policy = 'ignore' THEN 0 ELSE failed END AS failed
    FROM locked
), decided AS (
    SELECT *, CASE
        WHEN was <> {WAITING_SQL} OR open > 0 THEN was
        WHEN CASE mode WHEN 'complete' THEN true
                       WHEN 'failure' THEN failed > 0
                       ELSE failed = 0 OR policy <> 'cancel' END THEN {PENDING_SQL}
        ELSE {CANCELLED_SQL} END AS status
    FROM counted
), woke AS (
    UPDATE {T} c
    SET deps_open = d.open,
        deps_failed = d.failed,
        status = d.status,
        error = CASE
            WHEN d.status = {CANCELLED_SQL} AND d.was = {WAITING_SQL} AND d.mode = 'failure'
            THEN 'cancelled: no dependency failed'
            WHEN d.status = {CANCELLED_SQL} AND d.was = {WAITING_SQL}
            THEN 'cancelled: ' || COALESCE(c.error, 'dependency failed: step ' || d.culprit)
            WHEN d.newly_failed > 0
            THEN COALESCE(c.error, 'dependency failed: step ' || d.culprit)
            ELSE c.error END,
        finished_at = CASE WHEN d.status = {CANCELLED_SQL} AND d.was = {WAITING_SQL}
                           THEN clock_timestamp() ELSE c.finished_at END,
        updated_at = now()
    FROM decided d
    WHERE c.id = d.id
    RETURNING c.id, c.status, c.queue, c.has_dependants, d.was
), cascade AS (
    SELECT array_agg(id) AS ids FROM woke
    WHERE status = {CANCELLED_SQL} AND was = {WAITING_SQL} AND has_dependants
), wake AS (
    SELECT {{ring}} FROM (SELECT DISTINCT queue FROM woke WHERE status = {PENDING_SQL}) q
)""".strip()


def _fan_in_sql(statement: str, channel: str) -> str:
    """``statement`` (holding ``{ring}``) with the doorbell on ``channel``."""
    return statement.format(ring=doorbell.ring_sql(channel, "true", "q.queue", "%(channel)s"))


# The fan-in of jobs that ended in an earlier statement: the children a fan-in cancelled
# (`cascade`, resolved level by level), and the repair of any edge left open by an ended parent.
_RESOLVE_ENDED = f"""
WITH ended AS (
    SELECT id, status, step FROM {T}
    WHERE id = ANY(%(ids)s::bigint[]) AND status IN {TERMINAL_SQL} AND has_dependants
), {_FAN_IN}
SELECT (SELECT ids FROM cascade), (SELECT count(*) FROM wake)
"""


@functools.cache
def _resolve_ended_sql(channel: str) -> str:
    return _fan_in_sql(_RESOLVE_ENDED, channel)


def resolve_ended(ids: Sequence[int], using: str | None = None) -> None:
    """Resolve the open edges of the ended jobs ``ids``, and of the dependants that cancels,
    level by level (each level one statement; a level is a step of the DAG)."""
    channel = conf.get("NOTIFY_CHANNEL")
    with db.cursor(using) as cur:
        while ids:
            cur.execute(_resolve_ended_sql(channel), {"ids": list(ids), "channel": channel})
            ids = cur.fetchone()[0] or []


_OPEN_EDGES_OF_ENDED = f"""
SELECT p.id FROM {T} p
WHERE p.id IN (SELECT parent_id FROM {DEPENDENCY_TABLE} WHERE outcome IS NULL)
  AND p.status IN {TERMINAL_SQL}
LIMIT %s
"""


def repair_open_edges(limit: int = 1000, using: str | None = None) -> int:
    """Resolve the edges left open by parents that ended (a crash between a fan-in that
    cancelled a child and the resolution of that child's own edges); returns how many parents.
    Through the open edges' partial index: empty when every workflow is settled."""
    with db.cursor(using) as cur:
        cur.execute(_OPEN_EDGES_OF_ENDED, [limit])
        ids = [r[0] for r in cur.fetchall()]
    resolve_ended(ids, using=using)
    return len(ids)


# Plan safety (the lease-fenced writes below). The fence is the lease token: the CHECK
# pgjobs_job_lease_iff_running makes a non-NULL token mean RUNNING, so the statements do not
# repeat the status test, which could steer the planner to the partial lease index (a hash join
# over its dead entries; docs/performance.md). The LIMIT tells the planner how many completions
# there are, so the join stays a nested loop over the primary key (test_guards.py checks it).
_COMPLETIONS = """
    SELECT * FROM jsonb_to_recordset(%(completions)s::jsonb) AS v(
        id bigint, token uuid, attempt int, status text, result jsonb, error text,
        duration_ms bigint, delay double precision, run_at timestamptz, note text,
        progress jsonb)
    LIMIT %(n_completions)s"""

# The fenced UPDATE of every finalize (its SET and WHERE), over the completions `v`.
_FINALIZED = f"""
UPDATE {T} j
SET status = v.status,
    result = CASE WHEN v.result IS NULL THEN j.result ELSE j.result || v.result END,
    error = v.error,
    duration_ms = v.duration_ms,
    finished_at = CASE WHEN v.status = {PENDING_SQL} THEN NULL
                       ELSE j.started_at + v.duration_ms * interval '1 millisecond' END,
    run_after = CASE WHEN v.status = {PENDING_SQL}
                     THEN COALESCE(v.run_at, now() + v.delay * interval '1 second')
                     ELSE j.run_after END,
    history = CASE WHEN v.status IN ({PENDING_SQL}, {FAILED_SQL}, {CANCELLED_SQL})
                   THEN {_HISTORY_FINISHED}
                   ELSE j.history END,
    progress = CASE WHEN v.progress IS NULL THEN j.progress ELSE {_PROGRESS_VALUE} END,
    lease_token = NULL,
    lease_expires_at = NULL,
    updated_at = now()
FROM v
WHERE j.id = v.id AND j.lease_token = v.token AND j.attempts = v.attempt"""

# With fan-in: for a batch where some job had dependants when claimed.
_FINALIZE = f"""
WITH v AS ({_COMPLETIONS}
), fin AS ({_FINALIZED}
RETURNING j.id, j.status, j.step, j.has_dependants
), ended AS (  -- a retry (PENDING) resolves nothing
    SELECT id, status, step FROM fin WHERE has_dependants AND status <> {PENDING_SQL}
), {_FAN_IN}
SELECT id, (SELECT ids FROM cascade), (SELECT count(*) FROM wake) FROM fin
"""

# Without fan-in: for a batch where no job had dependants when claimed, planned at a third of
# the cost (docs/performance.md). Fenced on has_dependants too: a job that gained dependants
# since its claim is left RUNNING here, and finalized by _FINALIZE next (_written).
_FINALIZE_PLAIN = f"""
WITH v AS ({_COMPLETIONS}
){_FINALIZED} AND NOT j.has_dependants
RETURNING j.id
"""


@dataclass(slots=True)
class Completion:
    """What a worker writes when a run ends. ``status`` PENDING means: retry later."""

    id: int
    token: str | UUID  # the lease token; text on the worker's path
    attempt: int
    status: str
    result: dict[str, Any] | None = None
    error: str | None = None
    duration_ms: int = 0
    delay: float | None = None
    run_at: datetime | None = None
    note: str | None = None
    progress: dict[str, Any] | None = None  # the last progress reported (progress.record)
    written: bool = False  # already recorded in the handler's own transaction
    # False: the job had no dependants when claimed, its finalize tries the statement without
    # fan-in first (the fence on has_dependants decides, this only chooses the statement).
    fan_in: bool = True

    def as_record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": str(self.token),
            "attempt": self.attempt,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "delay": self.delay,
            "run_at": self.run_at.isoformat() if self.run_at else None,
            "note": self.note,
            "progress": self.progress,
        }


def finalize(completions: Sequence[Completion], using: str | None = None) -> set[int]:
    """Record the end of runs we still hold; returns the ids written.

    An id missing from the answer lost its lease (reaped, released, cancelled): nothing was
    overwritten.
    """
    if not completions:
        return set()
    cur = db.prepared_cursor(using)
    cur.execute(finalize_sql(completions), _finalize_params(completions))
    return _written(cur.fetchall(), completions, using)


@functools.cache
def _finalize_sql(channel: str) -> str:
    return _fan_in_sql(_FINALIZE, channel)


def finalize_sql(completions: Sequence[Completion] = ()) -> str:
    """The finalize statement for ``completions``: without fan-in when none of their jobs had
    dependants when claimed, else with it (for PGJOBS["NOTIFY_CHANNEL"]); no argument: with."""
    if completions and not any(c.fan_in for c in completions):
        return _FINALIZE_PLAIN
    return _finalize_sql(conf.get("NOTIFY_CHANNEL"))


def _finalize_params(completions: Sequence[Completion]) -> dict[str, Any]:
    return {
        "completions": "[" + ",".join(map(_completion_json, completions)) + "]",
        "n_completions": len(completions),
        "channel": conf.get("NOTIFY_CHANNEL"),
    }


def _written(
    rows: Sequence[tuple[Any, ...]], completions: Sequence[Completion], using: str | None
) -> set[int]:
    """The ids the finalize of ``completions`` wrote (first column). After the fan-in: the
    children it cancelled that have dependants of their own (second column, the same on every
    row) are resolved next. After the statement without: the jobs it left (lease lost, or
    dependants gained while running) are tried again with the fan-in."""
    written = {r[0] for r in rows}
    if rows and len(rows[0]) > 1 and rows[0][1]:
        resolve_ended(rows[0][1], using=using)
    elif len(written) < len(completions) and not any(c.fan_in for c in completions):
        left = [replace(c, fan_in=True) for c in completions if c.id not in written]
        written |= finalize(left, using=using)
    return written


def _completion_json(c: Completion) -> str:
    if (
        c.result is None
        and c.error is None
        and c.delay is None
        and c.run_at is None
        and (c.note is None and c.progress is None)
    ):  # a plain success, most of them
        return _success_json(c)
    return json.dumps(c.as_record(), separators=(",", ":"))


def _success_json(c: Completion) -> str:
    """A plain success's record formatted by hand: the finalize's hot path, measured faster than
    json.dumps (docs/performance.md). Ints, a UUID and a status name need no escaping; absent
    keys read as NULL in jsonb_to_recordset."""
    return (
        f'{{"id":{int(c.id)},"token":"{c.token}","attempt":{int(c.attempt)},'
        f'"status":"{c.status}","duration_ms":{int(c.duration_ms)}}}'
    )


def finalize_and_claim(
    completions: Sequence[Completion], *, using: str | None = None, **claim_args: Any
) -> tuple[set[int], list[ClaimedRow]]:
    """The worker's hot path in one round trip: record finished runs, then claim more.

    ``claim_args`` are those of :func:`claim`. Two statements sent together (one implicit
    transaction); each keeps its own fence: the finalize writes only runs whose lease we hold,
    the claim locks with SKIP LOCKED. With nothing to record or nothing to claim, it is the one
    statement that has work. Prepared (PGJOBS["PREPARED_STATEMENTS"]), they travel in one
    pipeline; otherwise as one multi-statement query, or in two round trips under Django's
    server-side binding (which takes one statement per query).
    """
    alias = using or conf.get("DATABASE")
    fair = claim_args.get("fair", False)
    pipelined = db.prepares(connections[alias]) and not fair  # the fair claim is never prepared
    if (
        not completions
        or not _claims(
            claim_args["types"],
            claim_args["limit"],
            claim_args.get("async_types", ()),
            claim_args.get("async_limit", 0),
        )
        or (pipelined and not db.PIPELINE)  # libpq older than 14
        or (not pipelined and db.server_side_binding(alias))
    ):  # one statement per query
        return finalize(completions, using=alias), claim(using=alias, **claim_args)
    if pipelined:
        conn = connections[alias]
        fin, cl = db.prepared_cursor(alias, 0), db.prepared_cursor(alias, 1)
        with db.pipeline(conn):
            fin.execute(finalize_sql(completions), _finalize_params(completions))
            cl.execute(_CLAIM, _claim_params(**claim_args))  # fair: never pipelined
        finalized, claimed = fin.fetchall(), _rows(cl)
        return _written(finalized, completions, alias), claimed
    params = {**_claim_params(**claim_args), **_finalize_params(completions)}
    with db.cursor(alias) as cur:
        cur.execute(finalize_sql(completions) + ";\n" + (_CLAIM_FAIR if fair else _CLAIM), params)
        finalized = cur.fetchall()
        cur.nextset()
        claimed = _rows(cur)
    return _written(finalized, completions, alias), claimed


# --- leases ------------------------------------------------------------------------------------

_HEARTBEAT = f"""
UPDATE {T} j SET lease_expires_at = now() + %s * interval '1 second'
FROM unnest(%s::bigint[], %s::uuid[]) AS l(id, token)
WHERE j.id = l.id AND j.lease_token = l.token
RETURNING j.id, j.cancel_requested
"""


def heartbeat(
    leases: Sequence[tuple[int, UUID | str]], lease_seconds: float, using: str | None = None
) -> dict[int, bool]:
    """Extend the leases we still hold. Returns {job id: cancel_requested}; a missing id is lost."""
    if not leases:
        return {}
    with db.cursor(using) as cur:
        cur.execute(
            _HEARTBEAT,
            [lease_seconds, [i for i, _ in leases], [str(t) for _, t in leases]],
        )
        return {r[0]: r[1] for r in cur.fetchall()}


# Progress reports (worker/progress.py): the latest of each job, fenced like every write.
_PROGRESS = f"""
UPDATE {T} j SET progress = {_PROGRESS_VALUE}
FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, token uuid, progress jsonb)
WHERE j.id = v.id AND j.lease_token = v.token
RETURNING j.id
"""


def write_progress(
    reports: Sequence[tuple[int, UUID | str, dict[str, Any]]], using: str | None = None
) -> set[int]:
    """Store the progress of running jobs we still hold: (id, lease token, progress.record)
    each. Returns the ids written; a missing id lost its lease (nothing written)."""
    if not reports:
        return set()
    doc = json.dumps(
        [{"id": i, "token": str(t), "progress": p} for i, t, p in reports], allow_nan=False
    )
    with db.cursor(using) as cur:
        cur.execute(_PROGRESS, [doc])
        return {r[0] for r in cur.fetchall()}


_RELEASE = f"""
UPDATE {T} j
SET status = {PENDING_SQL},
    attempts = j.attempts - CASE WHEN %s THEN 1 ELSE 0 END,
    run_after = now(),
    started_at = NULL,
    history = {_HISTORY_RELEASED},
    lease_token = NULL,
    lease_expires_at = NULL,
    updated_at = now()
FROM unnest(%s::bigint[], %s::uuid[]) AS l(id, token)
WHERE j.id = l.id AND j.lease_token = l.token
RETURNING j.id
"""


def release(
    leases: Sequence[tuple[int, UUID | str]],
    *,
    reason: str,
    refund_attempt: bool = True,
    using: str | None = None,
) -> set[int]:
    """Give jobs back to the queue now (worker shutdown). The attempt is refunded by default."""
    if not leases:
        return set()
    with db.cursor(using) as cur:
        cur.execute(
            _RELEASE,
            [refund_attempt, reason, [i for i, _ in leases], [str(t) for _, t in leases]],
        )
        return {r[0] for r in cur.fetchall()}


# A reaper takes the types it knows at once, others only once their lease is ``grace`` seconds
# past its expiry: a worker that knows the type (and its retry policy) gets the first go.
_EXPIRED = f"""
SELECT id, type, attempts, max_attempts FROM {T}
WHERE status = {RUNNING_SQL} AND lease_expires_at < COALESCE(%(now)s, now())
  AND (%(all_types)s OR type = ANY(%(types)s::text[])
       OR lease_expires_at < COALESCE(%(now)s, now()) - %(grace)s * interval '1 second')
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

_REAP = f"""
WITH fin AS (
UPDATE {T} j
SET status = v.status,
    error = 'lease expired: worker ' || COALESCE(j.locked_by, '?')
            || ' stopped renewing it (crashed, killed or stalled) during attempt '
            || j.attempts || '/' || j.max_attempts,
    finished_at = CASE WHEN v.status = {FAILED_SQL} THEN clock_timestamp() END,  -- as the claim
    run_after = CASE WHEN v.status = {FAILED_SQL} THEN j.run_after
                ELSE now() + v.delay * interval '1 second' END,
    history = {_HISTORY_REAPED},
    lease_token = NULL,
    lease_expires_at = NULL,
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(statuses)s::text[], %(delays)s::float8[]) AS v(id, status, delay)
WHERE j.id = v.id AND j.status = {RUNNING_SQL} AND j.lease_expires_at < COALESCE(%(now)s, now())
RETURNING j.id, j.type, j.status, j.attempts, j.max_attempts, j.step, j.has_dependants
), ended AS (  -- exhausted: FAILED, resolved by the fan-in; with attempts left, nothing
    SELECT id, status, step FROM fin WHERE has_dependants AND status = {FAILED_SQL}
), {_FAN_IN}
SELECT id, type, status, attempts, max_attempts, (SELECT ids FROM cascade),
       (SELECT count(*) FROM wake)
FROM fin
"""


@functools.cache
def _reap_sql(channel: str) -> str:
    return _fan_in_sql(_REAP, channel)


def reap(
    fate: Callable[[str, int, int], Any],
    *,
    limit: int = 500,
    now: datetime | None = None,
    known_types: Sequence[str] | None = None,
    grace: float = 0.0,
    using: str | None = None,
) -> list[tuple[int, str, str, int, int]]:
    """Rescue RUNNING jobs whose lease expired (before ``now``, default the database clock):
    ``fate(type, attempts, max_attempts)`` -> a retry.Decision says PENDING after its delay,
    or FAILED. Returns (id, type, status, attempts, max_attempts) of each job rescued.

    With ``known_types``, a job of another type is rescued only once its lease expired more
    than ``grace`` seconds ago. Safe to run from every worker at once (SKIP LOCKED, condition
    checked again).
    """
    alias = using or conf.get("DATABASE")
    with transaction.atomic(using=alias), db.cursor(alias) as cur:
        cur.execute(
            _EXPIRED,
            {
                "now": now,
                "limit": limit,
                "all_types": known_types is None,
                "types": list(known_types or []),
                "grace": grace,
            },
        )
        expired = cur.fetchall()
        if not expired:
            return []
        decisions = [
            fate(job_type, attempts, max_attempts)
            for _, job_type, attempts, max_attempts in expired
        ]
        channel = conf.get("NOTIFY_CHANNEL")
        cur.execute(
            _reap_sql(channel),
            {
                "now": now,
                "ids": [r[0] for r in expired],
                "statuses": [str(d.status) for d in decisions],
                "delays": [d.delay or 0.0 for d in decisions],
                "channel": channel,
            },
        )
        rows = cur.fetchall()
        if rows and rows[0][5]:
            resolve_ended(rows[0][5], using=alias)
        return [tuple(r[:5]) for r in rows]


# --- operator actions (admin, management commands) ---------------------------------------------


_HISTORY_MANUAL_RETRY = history_appended(
    history_entry(
        outcome="'manual_retry'",
        previous_status="status",
        error=f"left(error, {HISTORY_ERROR_CHARS})",
        attempt="attempts",
    ),
    "history",
)


def retry_now(ids: Iterable[int], using: str | None = None) -> list[int]:
    """FAILED / COMPLETED_WITH_ERRORS / CANCELLED -> PENDING, due now, with a fresh attempt
    budget (WAITING: a workflow step whose dependencies have not all ended)."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""UPDATE {T} SET status = CASE WHEN deps_open > 0 THEN {WAITING_SQL}
                                     ELSE {PENDING_SQL} END,
                    run_after = now(), attempts = 0,
                    finished_at = NULL, cancel_requested = false, updated_at = now(),
                    history = {_HISTORY_MANUAL_RETRY}
                WHERE id = ANY(%s::bigint[])
                  AND status IN {RETRYABLE_SQL}
                RETURNING id""",
            [list(ids)],
        )
        return [r[0] for r in cur.fetchall()]


def run_now(ids: Iterable[int], using: str | None = None) -> list[int]:
    """PENDING jobs scheduled for later -> due now."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""UPDATE {T} SET run_after = now(), updated_at = now()
                WHERE id = ANY(%s::bigint[]) AND status = {PENDING_SQL} AND run_after > now()
                RETURNING id""",
            [list(ids)],
        )
        return [r[0] for r in cur.fetchall()]


# A waiting workflow step is cancelled as a pending job is. The edges of the jobs it cancels
# are resolved by the next statement (resolve_ended), not by a fan-in in this one: a child
# cancelled here too would be written twice by one statement (PostgreSQL skips the second).
_CANCEL = f"""
UPDATE {T} SET status = {CANCELLED_SQL}, finished_at = now(), updated_at = now(),
    error = COALESCE(error, 'cancelled')
WHERE id = ANY(%(ids)s::bigint[]) AND status IN ({PENDING_SQL}, {WAITING_SQL})
RETURNING id, has_dependants
"""


def cancel(ids: Iterable[int], using: str | None = None) -> tuple[list[int], list[int]]:
    """PENDING or WAITING -> CANCELLED at once; RUNNING -> cancel requested (the handler may
    observe it).

    Returns (cancelled ids, cancel-requested ids).
    """
    ids = list(ids)
    alias = using or conf.get("DATABASE")
    with transaction.atomic(using=alias), db.cursor(alias) as cur:
        cur.execute(_CANCEL, {"ids": ids})
        rows = cur.fetchall()
        resolve_ended([r[0] for r in rows if r[1]], using=alias)
        cancelled = [r[0] for r in rows]
        cur.execute(
            f"""UPDATE {T} SET cancel_requested = true, updated_at = now()
                WHERE id = ANY(%(ids)s::bigint[]) AND status = {RUNNING_SQL}
                  AND NOT cancel_requested
                RETURNING id""",
            {"ids": ids},
        )
        requested = [r[0] for r in cur.fetchall()]
    return cancelled, requested


_HISTORY_DUPLICATED_FROM = history_entry(outcome="'duplicated_from'", job_id="id")


def duplicate(
    ids: Iterable[int], *, operated_by: str | None = None, using: str | None = None
) -> list[tuple[int, int]]:
    """Enqueue a fresh PENDING copy of each job (same type, queue, priority, config, trace and
    tenant; no unique key), due now. Returns (original id, new id) pairs."""
    channel = conf.get("NOTIFY_CHANNEL")
    ring = doorbell.ring_sql(channel, "true", "q.queue")
    with db.cursor(using) as cur:
        cur.execute(
            f"""WITH src AS (
                    SELECT id, type, queue, priority, config, trace_id, tenant_id, max_attempts
                    FROM {T} WHERE id = ANY(%s::bigint[])
                ), ins AS (
                    INSERT INTO {T} (type, queue, priority, config, trace_id, tenant_id,
                                     operated_by, max_attempts, history)
                    SELECT type, queue, priority, config, trace_id, tenant_id,
                           COALESCE(%s, 'duplicate of ' || id), max_attempts,
                           jsonb_build_array({_HISTORY_DUPLICATED_FROM})
                    FROM src ORDER BY id
                    RETURNING id, queue, history
                ), wake AS (
                    SELECT {ring}
                    FROM (SELECT DISTINCT queue FROM ins) q
                )
                SELECT (history -> 0 ->> 'job_id')::bigint, id, (SELECT count(*) FROM wake)
                FROM ins ORDER BY id""",
            [list(ids), operated_by, channel],
        )
        return [(r[0], r[1]) for r in cur.fetchall()]


def delete_terminal(ids: Iterable[int], using: str | None = None) -> list[int]:
    """Delete finished jobs (COMPLETED, COMPLETED_WITH_ERRORS, FAILED, CANCELLED) only."""
    with db.cursor(using) as cur:
        cur.execute(
            f"""DELETE FROM {T} WHERE id = ANY(%s::bigint[])
                AND status IN {TERMINAL_SQL}
                RETURNING id""",
            [list(ids)],
        )
        return [r[0] for r in cur.fetchall()]


# A retry by the admin completes the entry retry_now() appended; any other action appends one.
_NOTE_OPERATOR_ACTION = f"""
UPDATE {T} SET history = CASE
    WHEN %(outcome)s = 'manual_retry' AND history -> -1 ->> 'outcome' = 'manual_retry'
         AND NOT (history -> -1 ? 'by')
    THEN jsonb_set(history, '{{-1}}',
                   (history -> -1) || {history_entry(by="%(by)s::text", at="now()")})
    ELSE {
    history_appended(
        "jsonb_strip_nulls("
        + history_entry(
            outcome="%(outcome)s::text",
            by="%(by)s::text",
            at="now()",
            status="status",
            job_id="(%(copies)s::jsonb ->> id::text)::bigint",
        )
        + ")",
        "history",
    )
}
    END
WHERE id = ANY(%(ids)s::bigint[])
"""


def note_operator_action(
    ids: Sequence[int], outcome: str, by: str, copies: dict[int, int], using: str | None = None
) -> None:
    """Who and when, in each job's history (admin_audit.py): completes the 'manual_retry' entry
    retry_now() just appended, or appends an entry of its own (``copies``: original -> copy)."""
    extra = json.dumps({str(k): v for k, v in copies.items()})
    with db.cursor(using) as cur:
        cur.execute(
            _NOTE_OPERATOR_ACTION,
            {"outcome": outcome, "by": by, "ids": list(ids), "copies": extra},
        )


# --- aging (aging.py) ---------------------------------------------------------------------------

# A job's (j) aged priority: its base plus one step per `every` seconds it has been due, capped.
_AGED = (
    "LEAST(r.cap, COALESCE(j.base_priority, j.priority)"
    " + floor(extract(epoch FROM c.now - j.run_after) / r.every)::int)"
)

# The claim index read level by level: a loose index scan finds the priorities that have
# PENDING jobs, then each level is one range scan (priority = level, run_after <= now - the
# shortest step), oldest first. Rows are locked SKIP LOCKED (a claim in progress is left
# alone; a locked row stays PENDING) and the lift is computed again from the locked row;
# base_priority keeps the original. `id = ANY(ARRAY(...))`, as the claim: a probe of the
# primary key per row (a join on picked was planned as a scan of every pending job).
_AGE = f"""
WITH RECURSIVE clock AS (
    SELECT COALESCE(%(now)s::timestamptz, now()) AS now
), rules AS (
    SELECT * FROM unnest(%(queues)s::text[], %(every)s::float8[], %(cap)s::int[])
        AS r(queue, every, cap)
), levels AS (
    (SELECT priority FROM {T} WHERE status = {PENDING_SQL} ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {T} j
            WHERE j.status = {PENDING_SQL} AND j.priority < l.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL
), candidates AS MATERIALIZED (
    SELECT x.id FROM levels l CROSS JOIN clock c CROSS JOIN LATERAL (
        SELECT j.id FROM {T} j
        WHERE j.status = {PENDING_SQL} AND j.priority = l.priority
          AND j.run_after <= c.now - %(shortest)s * interval '1 second'
          AND j.queue = ANY(%(queues)s::text[])
          AND EXISTS (SELECT 1 FROM rules r
                      WHERE r.queue = j.queue AND {_AGED} > j.priority)
        ORDER BY j.run_after
        LIMIT %(limit)s
    ) x
    WHERE l.priority IS NOT NULL
    LIMIT %(limit)s
), picked AS MATERIALIZED (
    SELECT id FROM {T}
    WHERE id = ANY(ARRAY(SELECT id FROM candidates)) AND status = {PENDING_SQL}
    FOR UPDATE SKIP LOCKED
)
UPDATE {T} j
SET base_priority = COALESCE(j.base_priority, j.priority),
    priority = {_AGED},
    updated_at = now()
FROM rules r, clock c
WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND r.queue = j.queue
  AND {_AGED} > j.priority
RETURNING j.id
"""


def age(
    rules: Sequence[tuple[str, float, int]],
    *,
    limit: int = 1000,
    now: datetime | None = None,
    using: str | None = None,
) -> int:
    """Lift due PENDING jobs of the rules' queues ((queue, every seconds, max priority) each)
    one priority step per ``every`` seconds they waited; at most ``limit`` per priority level.
    Returns how many were lifted. Idempotent: any number of workers may run it."""
    if not rules:
        return 0
    with db.cursor(using) as cur:
        cur.execute(
            _AGE,
            {
                "now": now,
                "queues": [r[0] for r in rules],
                "every": [r[1] for r in rules],
                "cap": [r[2] for r in rules],
                "shortest": min(r[1] for r in rules),
                "limit": limit,
            },
        )
        return int(cur.rowcount)


# --- retention (retention.py) ------------------------------------------------------------------

# Short statements that lock only the rows they delete (SKIP LOCKED: an admin viewing or
# retrying a job is never waited for), oldest first through the finished_at index.
_PRUNE_FINISHED = f"""
WITH doomed AS MATERIALIZED (
    SELECT id FROM {T}
    WHERE status = %(status)s AND finished_at < %(cutoff)s
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {T} j USING doomed WHERE j.id = doomed.id AND j.status = %(status)s
"""


def prune_finished(*, status: str, cutoff: datetime, limit: int, using: str | None = None) -> int:
    """Delete up to ``limit`` jobs in a terminal ``status`` that finished before ``cutoff``."""
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"only finished jobs are pruned, not {status!r}")
    with db.cursor(using) as cur:
        cur.execute(_PRUNE_FINISHED, {"status": status, "cutoff": cutoff, "limit": limit})
        return int(cur.rowcount)
