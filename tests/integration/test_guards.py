"""Guard tests: when one fails, its message says how to fix it."""

import io
import re
from dataclasses import replace

import pytest
from django.core.management import call_command

from django_pgjobs.status import JobStatus
from tests.conftest import sql, sql_one

pytestmark = pytest.mark.django_db


def test_status_choices_match_the_check_constraint():
    definition = sql_one(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conname = 'pgjobs_job_status_valid'"
    )
    array = re.search(r"'\{([A-Z_,]+)\}'::text\[\]", definition)
    assert array, definition
    in_db = set(array.group(1).split(","))
    assert in_db == set(JobStatus.values), (
        "JobStatus choices differ from the CHECK constraint: update both in models.py/status.py "
        "and add a migration (manage.py makemigrations django_pgjobs)"
    )


def test_no_missing_migrations():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:
        pytest.fail(
            "models changed without a migration: run manage.py makemigrations\n" + out.getvalue()
        )


@pytest.mark.django_db(transaction=True)  # committed rows, as ANALYZE sees them in production
@pytest.mark.parametrize("fair", [False, True])
def test_claim_uses_the_partial_index(fair):
    """The real claim statement walks a partial index and stops after LIMIT rows: it neither
    scans finished jobs nor sorts every pending one."""
    from django_pgjobs import queries

    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at) SELECT 'test.noop', 'COMPLETED', now() "
        "FROM generate_series(1, 20000)"
    )
    sql(
        "INSERT INTO pgjobs_job (type, tenant_id) SELECT 'test.noop', 't' || (i % 3) "
        "FROM generate_series(1, 20000) i"
    )
    sql("ANALYZE pgjobs_job")
    params = {
        "types": ["test.noop"],
        "all_queues": True,
        "queues": [],
        "limit": 10,
        "async_types": ["test.asleep"],
        "async_limit": 10,
        "worker": "w",
        "lease": 30.0,
        "after": "",
        "controlled": ["crm"],  # a queue PGJOBS["QUEUES"] controls: left to its own claim
    }
    statement = queries._CLAIM_FAIR if fair else queries._CLAIM
    plan = "\n".join(r[0] for r in sql("EXPLAIN " + statement, params))
    index = "pgjobs_job_fair_idx" if fair else "pgjobs_job_claim_idx"
    assert index in plan, plan
    assert "Seq Scan on pgjobs_job " not in plan, (
        "the claim scans the whole jobs table: check the planner's estimate of its filters "
        "(see the comment above _CLAIM in queries.py)\n" + plan
    )


@pytest.mark.django_db(transaction=True)
def test_queue_depth_reads_only_active_jobs():
    """The depth per queue (dashboard, depth sampler, queue admin) goes through the partial
    indexes of PENDING and RUNNING jobs: finished jobs, millions of them, are never scanned."""
    from django_pgjobs.sql import queues, rollups

    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at) SELECT 'test.noop', 'COMPLETED', now() "
        "FROM generate_series(1, 50000)"
    )
    sql("INSERT INTO pgjobs_job (type) SELECT 'test.noop' FROM generate_series(1, 20)")
    sql("ANALYZE pgjobs_job")
    for name, statement in (
        ("DEPTH_BY_QUEUE", rollups.DEPTH_BY_QUEUE),
        ("queue_overview", queues.QUEUE_OVERVIEW),
    ):
        plan = "\n".join(r[0] for r in sql("EXPLAIN " + statement))
        assert "Seq Scan on pgjobs_job" not in plan, (
            f"{name} scans the whole jobs table: keep one branch per partial index "
            "(status = 'PENDING' / status = 'RUNNING'), never status IN (...)\n" + plan
        )
        assert "pgjobs_job_claim_idx" in plan and "pgjobs_job_lease_idx" in plan, plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("status", "index"),
    [
        ("CANCELLED", "pgjobs_job_prune_idx"),
        ("FAILED", "pgjobs_job_prune_idx"),
        ("COMPLETED_WITH_ERRORS", "pgjobs_job_prune_idx"),
        ("COMPLETED", "pgjobs_job_stats_idx"),
    ],
)
def test_pruning_a_rare_status_does_not_walk_the_completed_jobs(status, index):
    """Retention deletes the oldest jobs of one status: for the rare (problem) statuses the range
    of that status alone, never the millions of COMPLETED jobs finished before the cutoff."""
    from django_pgjobs import queries

    sql(
        "INSERT INTO pgjobs_job (type, status, finished_at) SELECT 'test.noop', "
        "CASE WHEN i % 100 = 0 THEN 'CANCELLED' WHEN i % 101 = 0 THEN 'FAILED' "
        "WHEN i % 103 = 0 THEN 'COMPLETED_WITH_ERRORS' ELSE 'COMPLETED' END, "
        "now() - interval '40 days' + i * interval '1 second' FROM generate_series(1, 50000) i"
    )
    sql("ANALYZE pgjobs_job")
    plan = "\n".join(
        r[0]
        for r in sql(
            "EXPLAIN " + queries._PRUNE_FINISHED,
            {"status": status, "cutoff": "2100-01-01", "limit": 1000},
        )
    )
    assert index in plan, f"pruning {status} does not use {index}: see models.py\n" + plan


def test_the_id_is_generated_always():
    assert (
        sql_one(
            "SELECT identity_generation FROM information_schema.columns "
            "WHERE table_name='pgjobs_job' AND column_name='id'"
        )
        == "ALWAYS"
    )


@pytest.mark.django_db(transaction=True)
def test_a_table_without_statistics_is_analyzed_once():
    """Workers ANALYZE the jobs table at start if PostgreSQL never did (fresh deployment)."""
    from django_pgjobs import db

    sql("CREATE TABLE pgjobs_analyze_probe (id int)")
    try:
        sql("INSERT INTO pgjobs_analyze_probe SELECT generate_series(1, 500)")
        assert sql_one("SELECT reltuples FROM pg_class WHERE relname = 'pgjobs_analyze_probe'") < 0
        assert db.analyze_if_never_analyzed("pgjobs_analyze_probe") is True
        assert (
            sql_one("SELECT reltuples FROM pg_class WHERE relname = 'pgjobs_analyze_probe'") == 500
        )
        assert db.analyze_if_never_analyzed("pgjobs_analyze_probe") is False
    finally:
        sql("DROP TABLE pgjobs_analyze_probe")


@pytest.mark.django_db(transaction=True)
def test_lease_fenced_writes_join_on_the_primary_key_after_a_burst():
    """Finalize, heartbeat and release find their rows by id, whatever the statistics say.

    An ANALYZE taken right after a burst of enqueues sees no running job. With the fence
    written `status = 'RUNNING'`, the planner then chose the partial lease index and a hash
    join over all of its entries, dead ones included, in every batch: a cost that grows as a
    drain goes (see the comment above _FINALIZE in queries.py).
    """
    from uuid import uuid4

    from django_pgjobs import queries
    from django_pgjobs.queries import Completion

    sql("INSERT INTO pgjobs_job (type) SELECT 'test.noop' FROM generate_series(1, 20000)")
    sql("ANALYZE pgjobs_job")
    completions = [
        Completion(id=i, token=uuid4(), attempt=1, status=JobStatus.COMPLETED) for i in range(1, 11)
    ]
    leases = [[c.id for c in completions], [str(c.token) for c in completions]]
    plain = [replace(c, fan_in=False) for c in completions]
    plans = {
        "finalize": (queries.finalize_sql(), queries._finalize_params(completions)),
        "plain finalize": (queries.finalize_sql(plain), queries._finalize_params(plain)),
        "heartbeat": (queries._HEARTBEAT, [30.0, *leases]),
        "release": (queries._RELEASE, [True, "test", *leases]),
    }
    for name, (statement, params) in plans.items():
        plan = "\n".join(r[0] for r in sql("EXPLAIN " + statement, params))
        assert "pgjobs_job_pkey" in plan and "pgjobs_job_lease_idx" not in plan, (
            f"the {name} statement does not look its rows up by id:\n{plan}"
        )


def _explain_generic(name: str, statement: str, types: dict[str, str], args: dict) -> str:
    """EXPLAIN the plan a worker's connection caches for ``statement`` (prepared, planned
    once: plan_cache_mode force_generic_plan, as db.use_generic_plans sets it)."""
    import re

    order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))
    positional = re.sub(r"%\((\w+)\)s", lambda m: f"${order.index(m.group(1)) + 1}", statement)
    sql("SET plan_cache_mode = force_generic_plan")
    try:
        sql(f"PREPARE {name} ({', '.join(types[n] for n in order)}) AS {positional}")
        placeholders = ", ".join(["%s"] * len(order))
        plan = "\n".join(
            r[0] for r in sql(f"EXPLAIN EXECUTE {name} ({placeholders})", [args[n] for n in order])
        )
        sql(f"DEALLOCATE {name}")
    finally:
        sql("RESET plan_cache_mode")
    return plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("history", ["finished", "burst"])
def test_the_workers_generic_plans_walk_the_same_indexes(history):
    """The claim and the finalize are planned once per worker connection (their generic plan
    cannot know the LIMIT nor the number of completions): the claim must still walk the
    partial index and update its rows by id, the finalize find its rows by id, both after a
    history of finished jobs and right after a burst of enqueues."""
    from uuid import uuid4

    from django_pgjobs import queries
    from django_pgjobs.queries import Completion

    if history == "finished":
        sql(
            "INSERT INTO pgjobs_job (type, status, finished_at) SELECT 'test.noop', "
            "'COMPLETED', now() FROM generate_series(1, 20000)"
        )
    sql("INSERT INTO pgjobs_job (type) SELECT 'test.noop' FROM generate_series(1, 20000)")
    sql("ANALYZE pgjobs_job")
    claim = _explain_generic(
        "pgjobs_test_claim",
        queries._CLAIM,
        {
            "types": "text[]",
            "all_queues": "boolean",
            "queues": "text[]",
            "limit": "integer",
            "async_types": "text[]",
            "async_limit": "integer",
            "worker": "text",
            "lease": "double precision",
            "controlled": "text[]",
        },
        {
            "types": ["test.noop"],
            "all_queues": True,
            "queues": [],
            "limit": 50,
            "async_types": ["test.asleep"],
            "async_limit": 50,
            "worker": "w",
            "lease": 30.0,
            "controlled": ["crm"],
        },
    )
    assert "pgjobs_job_claim_idx" in claim and "pgjobs_job_pkey" in claim, claim
    assert "Seq Scan on pgjobs_job" not in claim and "Hash Join" not in claim, claim
    completions = [
        Completion(id=i, token=uuid4(), attempt=1, status=JobStatus.COMPLETED) for i in range(1, 51)
    ]
    plain = [replace(c, fan_in=False) for c in completions]
    for statement in (queries.finalize_sql(), queries.finalize_sql(plain)):  # fan-in or not
        finalize = _explain_generic(
            "pgjobs_test_finalize",
            statement,
            {"completions": "text", "n_completions": "integer", "channel": "text"},
            queries._finalize_params(completions),
        )
        assert "pgjobs_job_pkey" in finalize and "Seq Scan on pgjobs_job" not in finalize, finalize
        assert "pgjobs_job_lease_idx" not in finalize, finalize


@pytest.mark.django_db(transaction=True)
def test_the_worker_plans_its_statements_once_on_its_own_connection_only(monkeypatch):
    from django.db import connection

    from django_pgjobs import db, enqueue
    from tests.conftest import run_worker

    monkeypatch.setattr(db, "GENERIC_PLANS_MIN_ROWS", 1)  # this table's statistics will do
    enqueue("test.noop", {})
    run_worker()
    assert sql_one("SHOW plan_cache_mode") == "force_generic_plan"  # the worker's connection
    connection.close()
    enqueue("test.noop", {})
    assert sql_one("SHOW plan_cache_mode") == "auto"  # an ordinary connection: untouched
    from django_pgjobs.testing import run_jobs

    run_jobs()  # inline, on the caller's connection
    assert sql_one("SHOW plan_cache_mode") == "auto"
    db.use_generic_plans()
    assert sql_one("SHOW plan_cache_mode") == "force_generic_plan"


@pytest.mark.django_db(transaction=True)
def test_no_generic_plans_from_the_statistics_of_an_empty_table(monkeypatch):
    """A generic claim planned from an empty table's statistics scans the table whole, and
    would go on doing so as it grows (with autovacuum off, for the connection's life): the
    worker plans each execution afresh until the statistics describe enough rows, looking at
    them again at most every GENERIC_PLANS_RECHECK seconds."""
    from django.db import connection

    from django_pgjobs import db

    sql("ANALYZE pgjobs_job")  # empty: what a first worker start does to a new table
    db.use_generic_plans()
    assert sql_one("SHOW plan_cache_mode") == "auto"
    sql(
        "INSERT INTO pgjobs_job (type) SELECT 'test.noop' FROM generate_series(1, %s)",
        [db.GENERIC_PLANS_MIN_ROWS],
    )
    sql("ANALYZE pgjobs_job")
    db.use_generic_plans()
    assert sql_one("SHOW plan_cache_mode") == "auto"  # looked less than the recheck ago
    connection.connection._pgjobs_generic_recheck = 0.0  # as if the interval had passed
    db.use_generic_plans()
    assert sql_one("SHOW plan_cache_mode") == "force_generic_plan"


def backlog_on_one_key() -> None:
    """50,000 due jobs of key 'a' and one of each of 1,000 other keys in queue crm, 20,000 plain."""
    sql(
        "INSERT INTO pgjobs_job (type, queue, flow_key) "
        "SELECT 'test.noop', 'crm', 'a' FROM generate_series(1, 50000)"
    )
    sql(
        "INSERT INTO pgjobs_job (type, queue, flow_key) "
        "SELECT 'test.noop', 'crm', 'k' || i FROM generate_series(1, 1000) i"
    )
    sql("INSERT INTO pgjobs_job (type) SELECT 'test.noop' FROM generate_series(1, 20000)")


def controlled_claim_plan(statement: str) -> tuple[dict, str, int]:
    """EXPLAIN ANALYZE of a controlled claim of 8 from queue crm (rolled back): the plan, its
    text and the blocks it read."""
    from django.db import connection, transaction

    from django_pgjobs import flow, queries

    params = queries._controlled_params(
        queries.ControlledQueue("crm", flow.queues()["crm"]), "w", ["test.noop"], 8, 30
    )
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
        plan = cur.fetchone()[0][0]
        transaction.set_rollback(True)
    hits = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"].get("Shared Read Blocks", 0)
    return plan, str(plan), hits


def job_seq_scans(node: dict) -> list[dict]:
    """The plan's sequential scans of pgjobs_job (a tiny side table may be scanned: pgjobs_rate)."""
    node = node.get("Plan", node)
    own = (
        [node] if node["Node Type"] == "Seq Scan" and node["Relation Name"] == "pgjobs_job" else []
    )
    return own + [n for child in node.get("Plans", []) for n in job_seq_scans(child)]


@pytest.mark.django_db(transaction=True)
def test_the_controlled_claim_never_walks_a_throttled_backlog(settings):
    """50,000 due jobs of one key at its per-key limit, 1,000 other keys: the claim reads each
    key's head through pgjobs_job_flow_pending_idx (a loose index scan), never the held key's
    backlog nor the other queues' jobs (docs/flow-control.md)."""

    from django_pgjobs import queries

    settings.PGJOBS = {
        **settings.PGJOBS,
        "QUEUES": {"crm": {"per_key": 1, "key": "config.c", "rate": "1000/s", "burst": 10}},
    }
    backlog_on_one_key()
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 hour' "
        "WHERE id = (SELECT min(id) FROM pgjobs_job WHERE flow_key = 'a')"
    )
    sql("ANALYZE pgjobs_job")
    plan, text, hits = controlled_claim_plan(queries._CLAIM_CONTROLLED)
    assert "pgjobs_job_flow_pending_idx" in text and not job_seq_scans(plan), text[:3000]
    assert hits < 1500, (
        f"the controlled claim read {hits} blocks: it walks a held key's backlog. Keep the loose "
        "index scan over (queue, flow_key) lazy (no sort or join that reads every key first)"
    )


@pytest.mark.django_db(transaction=True)
def test_the_fair_claim_reads_each_keys_head_not_its_backlog(settings):
    """Fair share lines every key with due work up by pass: 50,000 due jobs of one key and
    1,000 other keys, the claim visits each key's head through pgjobs_job_flow_pending_idx
    (one probe per key), never a key's backlog nor the other queues' jobs."""

    from django_pgjobs import queries

    settings.PGJOBS = {
        **settings.PGJOBS,
        "QUEUES": {"crm": {"key": "config.c", "fair": {"default": 1, "a": 3}}},
    }
    backlog_on_one_key()
    sql("ANALYZE pgjobs_job")
    plan, text, hits = controlled_claim_plan(queries._CLAIM_SHARED)
    assert "pgjobs_job_flow_pending_idx" in text and not job_seq_scans(plan), text[:3000]
    assert hits < 12_000, (
        f"the fair claim read {hits} blocks for 1,001 keys: it walks a key's backlog. Keep the "
        "loose index scan over (queue, flow_key): one probe per key with due work"
    )
