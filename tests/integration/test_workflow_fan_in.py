"""Fan-in: a workflow step waits for its dependencies, and the statement that ends the last one
makes it PENDING or CANCELLED, on every path that ends a job (finalize alone, finalize and
claim in one round trip, a transactional handler's own finalize, the reaper, cancel)."""

from __future__ import annotations

import json
from datetime import timedelta
from uuid import uuid4

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_pgjobs import Batch, InvalidJobOption, Workflow, chain, chord, flow, job, queries
from django_pgjobs.models import Job
from django_pgjobs.queries import Completion
from django_pgjobs.worker.maintenance import reaped_fate
from tests.acceptance.invariants import workflow_invariants
from tests.conftest import run_worker, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ["test.echo", "test.behave", "test.noop", "test.tx"]


def claim(limit=100, lease=30.0):
    return queries.claim(worker_id="w", types=TYPES, queues=None, limit=limit, lease_seconds=lease)


def done(row, status="COMPLETED", **kw):
    return Completion(id=row.id, token=row.lease_token, attempt=row.attempts, status=status, **kw)


def status(job_id):
    return Job.objects.get(pk=job_id).status


def counters(job_id):
    j = Job.objects.get(pk=job_id)
    return j.status, j.deps_open, j.deps_failed


def test_a_group_callback_waits_for_the_last_member_and_counts_each_edge_once():
    run = chord([("test.echo", {"i": i}) for i in range(3)], ("test.echo", {})).enqueue()
    cb = run["callback"][0]
    assert counters(cb) == ("WAITING", 3, 0)
    rows = claim()
    assert sorted(r.id for r in rows) == sorted(run["header"])  # a WAITING job is never claimed
    first = done(rows[0])
    assert queries.finalize([first]) == {rows[0].id}
    assert queries.finalize([first]) == set()  # a duplicate finalize: fenced, counts nothing
    assert counters(cb) == ("WAITING", 2, 0)
    queries.finalize([done(rows[1], result={"x": 1})])
    assert counters(cb) == ("WAITING", 1, 0)
    written, claimed = queries.finalize_and_claim(
        [done(rows[2])], worker_id="w", types=TYPES, queues=None, limit=5, lease_seconds=30.0
    )
    assert written == {rows[2].id}
    assert [c.id for c in claimed] == [cb]  # the callback, claimed in the same round trip
    assert sql_one("SELECT count(*) FROM pgjobs_dependency WHERE outcome IS NULL") == 0
    assert not workflow_invariants()


@override_settings(PGJOBS={"PREPARED_STATEMENTS": False})
def test_the_multi_statement_path_fans_in_too():
    run = chain(("test.echo", {}), ("test.echo", {})).enqueue()
    (row,) = claim()
    written, claimed = queries.finalize_and_claim(
        [done(row)], worker_id="w", types=TYPES, queues=None, limit=5, lease_seconds=30.0
    )
    assert written == {run["1"][0]} and [c.id for c in claimed] == run["2"]


def test_a_retry_resolves_nothing_and_a_stale_finalize_after_a_lost_lease_counts_nothing():
    run = chain(("test.behave", {}), ("test.echo", {})).enqueue()
    (row,) = claim()
    queries.finalize([done(row, status="PENDING", delay=0.0, error="again")])  # a retry
    assert counters(run["2"][0]) == ("WAITING", 1, 0)
    (row,) = claim(lease=0.01)
    later = timezone.now() + timedelta(seconds=5)
    queries.reap(reaped_fate, now=later)  # lease lost, attempts left: PENDING, nothing resolved
    assert status(row.id) == "PENDING" and counters(run["2"][0]) == ("WAITING", 1, 0)
    queries.run_now([row.id])  # past the reaper's backoff
    (again,) = claim()
    assert queries.finalize([done(row)]) == set()  # the stale run's finalize: fenced out
    assert counters(run["2"][0]) == ("WAITING", 1, 0)
    queries.finalize([done(again)])
    assert counters(run["2"][0]) == ("PENDING", 0, 0)
    assert not workflow_invariants()


def test_a_reaped_member_out_of_attempts_fails_and_cancels_its_dependants_transitively():
    wf = Workflow("etl")
    a = wf.add("fetch", "test.behave", {}, max_attempts=1)
    b = wf.add("parse", "test.echo", {}, after=a)
    wf.add("report", "test.echo", {}, after=b)
    wf.add("side", "test.echo", {})
    run = wf.enqueue()
    rows = claim(lease=0.01)
    assert {r.id for r in rows} == {run["fetch"][0], run["side"][0]}
    queries.reap(reaped_fate, now=timezone.now() + timedelta(seconds=5))
    assert status(run["fetch"][0]) == "FAILED"
    parse, report = Job.objects.get(pk=run["parse"][0]), Job.objects.get(pk=run["report"][0])
    assert parse.status == report.status == "CANCELLED"
    assert f"step fetch (job {run['fetch'][0]})" in parse.error
    assert parse.finished_at is not None and report.finished_at is not None
    assert status(run["side"][0]) == "PENDING"  # reaped with attempts left: not cancelled
    assert not workflow_invariants()


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("cancel", "CANCELLED"), ("continue", "PENDING"), ("ignore", "PENDING")],
)
def test_the_failure_policy_decides_at_zero(policy, expected):
    wf = Workflow("p", on_failure=policy)
    bad = wf.add("bad", "test.behave", {})
    good = wf.add("good", "test.echo", {})
    wf.add("after", "test.echo", {}, after=[bad, good])
    wf.add("on_error", "test.echo", {}, after=[bad], mode="failure")
    run = wf.enqueue()
    rows = {r.id: r for r in claim()}
    queries.finalize([done(rows[run["bad"][0]], status="FAILED", error="boom")])
    assert counters(run["after"][0]) == ("WAITING", 1, 0 if policy == "ignore" else 1)
    queries.finalize([done(rows[run["good"][0]])])
    assert status(run["after"][0]) == expected
    assert status(run["on_error"][0]) == ("CANCELLED" if policy == "ignore" else "PENDING")
    assert not workflow_invariants()


def test_batch_callbacks_by_mode():
    batch = Batch(
        [("test.echo", {"i": i}) for i in range(4)],
        on_success=("test.echo", {"cb": "success"}),
        on_failure=("test.echo", {"cb": "failure"}),
        on_complete=("test.echo", {"cb": "complete"}),
    )
    run = batch.enqueue()
    rows = claim()
    outcomes = ["COMPLETED", "FAILED", "COMPLETED_WITH_ERRORS", "CANCELLED"]
    queries.finalize([done(r, status=s, error="x") for r, s in zip(rows, outcomes, strict=True)])
    assert status(run["on_success"][0]) == "CANCELLED"
    assert status(run["on_failure"][0]) == "PENDING"
    assert status(run["on_complete"][0]) == "PENDING"
    assert counters(run["on_complete"][0]) == ("PENDING", 0, 2)
    assert not workflow_invariants()


def test_cancel_resolves_the_edges_of_pending_and_waiting_jobs():
    run = chain(("test.echo", {}), ("test.echo", {}), ("test.echo", {})).enqueue()
    assert queries.cancel([run["1"][0]]) == ([run["1"][0]], [])
    assert [status(run[s][0]) for s in "123"] == ["CANCELLED"] * 3
    run = chord([("test.echo", {})], ("test.echo", {})).enqueue()
    queries.cancel(run["callback"])  # a waiting job
    assert status(run["callback"][0]) == "CANCELLED"
    (row,) = claim()
    queries.finalize([done(row)])  # its parent ends later: counted, the status stays
    assert counters(run["callback"][0]) == ("CANCELLED", 0, 0)
    assert not workflow_invariants()


def test_a_plain_finalize_does_not_read_the_dependency_table():
    """Plan guard: in a batch that needs the fan-in, a job without dependants costs no edge
    scan (its nodes never execute)."""
    from django_pgjobs import enqueue

    chord([("test.echo", {})], ("test.echo", {})).enqueue()  # edges exist, not for this job
    plain = enqueue("test.noop", {})
    rows = [r for r in claim() if r.id == plain.id]
    params = queries._finalize_params([done(rows[0])])
    with transaction.atomic():
        plan = sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries.finalize_sql(), params)
        transaction.set_rollback(True)
    nodes = list(_nodes(plan[0][0][0]["Plan"]))
    edges = [n for n in nodes if n.get("Relation Name") == "pgjobs_dependency"]
    assert edges, "the fan-in's scan of pgjobs_dependency is in the plan"
    for n in edges:  # executed zero times, or with an empty key: no page read
        assert n["Actual Loops"] == 0 or (
            n["Actual Rows"] == 0 and n.get("Shared Hit Blocks", 0) == 0
        ), json.dumps(n)[:2000]


class Sent:
    """The statements sent on the default connection (an execute wrapper)."""

    def __init__(self):
        self.statements: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append(sql)
        return execute(sql, params, many, context)

    def naming(self, table):
        return [s for s in self.statements if table in s]


def _plain_paths():
    """Each finalize path, in each way its statements travel: prepared (one pipeline), not
    prepared (one multi-statement query), Django's server-side binding (a query each)."""
    prepared, simple = {"PREPARED_STATEMENTS": True}, {"PREPARED_STATEMENTS": False}
    ways = [(prepared, None), (simple, None), (simple, "server_binding")]
    paths = ("finalize_and_claim", "finalize_and_claim_controlled")
    return [("finalize", prepared, None)] + [(p, *w) for p in paths for w in ways]


def _finalize_by(path, completions, using):
    """``completions`` written by ``path``, with a claim of nothing due (a queue left empty)."""
    if path == "finalize":
        return queries.finalize(completions, using=using)
    if path == "finalize_and_claim":
        return queries.finalize_and_claim(
            completions, worker_id="w", types=TYPES, queues=["empty"], limit=5,
            lease_seconds=30.0, using=using,
        )[0]  # fmt: skip
    empty = queries.ControlledQueue("empty", flow.FlowSettings(concurrency=5))
    return queries.finalize_and_claim_controlled(
        completions, [empty], worker_id="w", types=TYPES, limit=5, lease_seconds=30.0,
        using=using,
    )[0]  # fmt: skip


@pytest.mark.django_db(transaction=True, databases=["default", "server_binding"])
@pytest.mark.parametrize(("path", "pgjobs", "using"), _plain_paths())
def test_a_batch_of_jobs_without_dependants_ends_without_the_fan_in(path, pgjobs, using):
    """Plan guard: the worker's finalize of plain jobs (claimed without dependants) never
    names pgjobs_dependency, prepared or not, alone or with the next claim."""
    from django_pgjobs import enqueue_many

    chord([("test.echo", {})], ("test.echo", {})).enqueue()  # edges exist, not for these
    enqueue_many("test.noop", [{}] * 3)
    with override_settings(PGJOBS=pgjobs):
        rows = [r for r in claim() if r.type == "test.noop"]
        assert rows and not any(r.has_dependants for r in rows)
        completions = [done(r, fan_in=r.has_dependants) for r in rows]
        sent = Sent()
        with connections[using or "default"].execute_wrapper(sent):
            written = _finalize_by(path, completions, using)
    assert written == {r.id for r in rows}
    assert sent.statements and not sent.naming("pgjobs_dependency"), sent.statements


def test_the_worker_ends_plain_jobs_without_the_fan_in_and_steps_with_it():
    from django.db import connection

    from django_pgjobs import enqueue_many

    run = chain(("test.echo", {}), ("test.echo", {})).enqueue()
    enqueue_many("test.noop", [{}] * 5)
    sent = Sent()
    with connection.execute_wrapper(sent):
        run_worker(concurrency=1)
    assert status(run["2"][0]) == "COMPLETED"
    assert Job.objects.filter(status="COMPLETED").count() == 7
    finalizes = [s for s in sent.statements if "jsonb_to_recordset" in s]
    assert any("pgjobs_dependency" in s for s in finalizes)  # the chain's first step
    assert any("pgjobs_dependency" not in s for s in finalizes)  # the plain jobs


def _gains_a_dependant(parent: int) -> int:
    """What part 6 of the issue does to an existing job (not yet an API): a WAITING child
    counting one open edge from ``parent``, which now has dependants. Returns the child."""
    from django_pgjobs import enqueue

    child = enqueue("test.echo", {}).id
    sql("UPDATE pgjobs_job SET status = 'WAITING', deps_open = 1 WHERE id = %s", [child])
    sql("INSERT INTO pgjobs_dependency (parent_id, child_id, mode) VALUES (%s, %s, 'success')",
        [parent, child])  # fmt: skip
    sql("UPDATE pgjobs_job SET has_dependants = true WHERE id = %s", [parent])
    return child


@pytest.mark.django_db(transaction=True, databases=["default", "server_binding"])
@pytest.mark.parametrize(("path", "pgjobs", "using"), _plain_paths())
def test_a_job_that_gained_a_dependant_while_running_still_resolves_its_edge(path, pgjobs, using):
    """Fan-in cannot be lost: the worker chose the statement without fan-in from the claim
    (no dependants then); its fence leaves the job, which is finalized with the fan-in."""
    from django_pgjobs import enqueue

    parent = enqueue("test.noop", {}).id
    with override_settings(PGJOBS=pgjobs):
        (row,) = claim()
        assert not row.has_dependants
        child = _gains_a_dependant(parent)
        written = _finalize_by(path, [done(row, fan_in=row.has_dependants)], using)
    assert written == {parent}
    assert status(parent) == "COMPLETED"
    assert counters(child) == ("PENDING", 0, 0)
    assert sql_one("SELECT outcome FROM pgjobs_dependency WHERE parent_id = %s", [parent]) == (
        "COMPLETED"
    )
    assert not workflow_invariants()


def test_a_lost_lease_is_still_refused_after_the_statement_without_fan_in():
    from django_pgjobs import enqueue

    parent = enqueue("test.noop", {}).id
    (row,) = claim()
    child = _gains_a_dependant(parent)
    stale = Completion(id=row.id, token=uuid4(), attempt=row.attempts, status="COMPLETED",
                       fan_in=False)  # fmt: skip
    assert queries.finalize([stale]) == set()
    assert status(parent) == "RUNNING" and counters(child) == ("WAITING", 1, 0)


def _nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def test_the_edges_resolve_through_their_indexes():
    run = chord([("test.echo", {"i": i}) for i in range(3000)], ("test.echo", {})).enqueue()
    sql("ANALYZE pgjobs_dependency")
    row = claim(limit=1)[0]
    params = queries._finalize_params([done(row)])
    with transaction.atomic():
        plan = "\n".join(r[0] for r in sql("EXPLAIN ANALYZE " + queries.finalize_sql(), params))
        transaction.set_rollback(True)
    assert "Seq Scan on pgjobs_dependency" not in plan, plan
    assert "pgjobs_dependency_open_idx" in plan or "pgjobs_dependency_pkey" in plan, plan
    assert run


def test_a_transactional_handlers_own_finalize_fans_in():
    run = chain(("test.tx", {"value": "a"}), ("test.echo", {})).enqueue()
    run_worker(concurrency=1)
    assert status(run["1"][0]) == "COMPLETED" and status(run["2"][0]) == "COMPLETED"
    assert not workflow_invariants()


def test_upstream_results_and_dependencies_from_a_handler():
    from django_pgjobs.context import JobContext

    wf = Workflow("r")
    a = wf.add("fetch", "test.echo", {"day": 1})
    parts = wf.group("parse", "test.echo", [{"p": i} for i in range(5)], after=a)
    wf.add("report", "test.echo", {}, after=[a, parts])
    run = wf.enqueue()
    run_worker(concurrency=2)
    report = Job.objects.get(pk=run["report"][0])
    ctx = JobContext(
        id=report.id,
        type=report.type,
        queue="default",
        priority=0,
        config={},
        attempts=1,
        max_attempts=1,
        trace_id=None,
        tenant_id=None,
        created_at=report.created_at,
        worker_id="w",
        lease_token=uuid4(),
    )
    assert ctx.upstream("fetch") == {"echo": {"day": 1}}
    assert sorted(r["echo"]["p"] for r in ctx.upstream_results("parse", page=2)) == list(range(5))
    with pytest.raises(ValueError, match="group"):
        ctx.upstream("parse")
    assert sorted(ctx.dependencies) == ["COMPLETED"] and len(ctx.dependencies["COMPLETED"]) == 6


def test_bad_input_writes_nothing_and_leaves_the_transaction_usable():
    from django_pgjobs import enqueue

    with transaction.atomic():
        wf = Workflow("bad")
        wf.add("a", "test.echo", {}, after="b")
        wf.add("b", "test.echo", {}, after="a")
        with pytest.raises(InvalidJobOption, match="cycle.*a -> b -> a|cycle.*b -> a -> b"):
            wf.enqueue()
        enqueue("test.echo", {})  # the transaction goes on
    assert sql_one("SELECT count(*) FROM pgjobs_job") == 1
    assert sql_one("SELECT count(*) FROM pgjobs_workflow") == 0


def test_a_group_over_one_chunk_is_one_insert_per_5000_and_its_edges():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    wf = Workflow("wide")
    members = wf.group("m", "test.noop", [{"i": i} for i in range(6000)])
    wf.add_spec("cb", job("test.noop"), after=members)
    with CaptureQueriesContext(connection) as seen:
        run = wf.enqueue()
    writes = [q["sql"] for q in seen.captured_queries if "INSERT" in q["sql"]]
    assert len(writes) == 4, [w[:80] for w in writes]  # workflow row, 2 chunks, the edges
    assert counters(run["cb"][0]) == ("WAITING", 6000, 0)
    assert sql_one("SELECT count(*) FROM pgjobs_job WHERE has_dependants") == 6000


def test_the_reaper_repairs_edges_a_crash_left_open():
    """A crash between a fan-in that cancelled a step and the resolution of that step's own
    edges leaves them open: the reaper's pass resolves them (and says how many)."""
    from django_pgjobs.worker.maintenance import Reaper

    run = chain(("test.echo", {}), ("test.echo", {}), ("test.echo", {})).enqueue()
    sql(  # what the first statement of such a cascade leaves behind
        "UPDATE pgjobs_job SET status = 'CANCELLED', finished_at = now(), error = 'x' "
        "WHERE id = ANY(%s)",
        [run["1"] + run["2"]],
    )
    sql("UPDATE pgjobs_dependency SET outcome = 'CANCELLED' WHERE parent_id = %s", run["1"])
    sql("UPDATE pgjobs_job SET deps_open = 0 WHERE id = %s", run["2"])
    assert workflow_invariants()  # the open edge 2 -> 3 is seen
    assert Reaper(using="default").run_once()["repaired"] == 1
    assert status(run["3"][0]) == "CANCELLED"
    assert not workflow_invariants()
    assert "repaired" not in Reaper(using="default").run_once()


def test_the_admin_lists_a_workflows_jobs_and_waiting_ones(admin_client):
    run = chord([("test.echo", {})], ("test.echo", {})).enqueue()
    chain(("test.echo", {})).enqueue()  # another workflow
    page = admin_client.get(f"/admin/django_pgjobs/job/?workflow={run.id}")
    assert page.status_code == 200
    shown = {j.id for j in page.context["cl"].result_list}
    assert shown == set(run["header"] + run["callback"])
    page = admin_client.get("/admin/django_pgjobs/job/?state=WAITING")
    assert {j.id for j in page.context["cl"].result_list} == set(run["callback"])


def test_cancel_workflow_ends_every_job_not_yet_ended():
    from django_pgjobs import cancel_workflow

    wf = Workflow("c")
    a = wf.add("a", "test.echo", {})
    b = wf.add("b", "test.echo", {})
    wf.add("c", "test.echo", {}, after=[a, b])
    run = wf.enqueue()
    other = chain(("test.echo", {})).enqueue()
    running = [r for r in claim(limit=1)]
    assert running[0].id == run["a"][0]
    result = cancel_workflow(run)
    assert result.requested == run["a"] and sorted(result.cancelled) == run["b"] + run["c"]
    assert status(other["1"][0]) == "PENDING"
    assert not workflow_invariants()


def test_a_manual_retry_of_an_ended_parent_counts_nothing_again():
    run = chord([("test.echo", {}), ("test.echo", {})], ("test.echo", {})).enqueue()
    rows = claim()
    queries.finalize([done(rows[0], status="FAILED", error="x")])
    assert queries.retry_now([rows[0].id]) == [rows[0].id]
    (again,) = claim()
    queries.finalize([done(again)])  # its edge was resolved by the first end: not again
    assert counters(run["callback"][0]) == ("WAITING", 1, 1)
    queries.finalize([done(rows[1])])
    assert status(run["callback"][0]) == "CANCELLED"  # decided by the first outcome (part 7)
    assert not workflow_invariants()
