"""Flow control inside the claim (docs/flow-control.md): per-key limits, rates (GCRA), the
queue's row over PGJOBS["QUEUES"], flow keys at enqueue. One connection, real PostgreSQL."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_pgjobs import InvalidJobOption, chain, enqueue, enqueue_many, flow, job, queries
from django_pgjobs.models import Job, Queue
from django_pgjobs.queries import Completion, ControlledQueue
from tests.conftest import sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ["test.noop", "test.behave"]


@pytest.fixture
def queues(settings):
    def declare(**declared):
        settings.PGJOBS = {**settings.PGJOBS, "QUEUES": declared}

    return declare


def claim(queue="crm", limit=50, after=None):
    return queries.claim_controlled(
        queue=queue,
        controls=flow.queues().get(queue, flow.FlowSettings()),
        worker_id="w",
        types=TYPES,
        limit=limit,
        lease_seconds=30,
        after_key=after,
    )


def finish(rows):
    sql(
        "UPDATE pgjobs_job SET status='COMPLETED', lease_token=NULL, lease_expires_at=NULL "
        "WHERE id = ANY(%s)",
        [[r.id for r in rows]],
    )


def test_flow_key_comes_from_the_queues_key_path_or_the_argument(queues):
    queues(crm={"per_key": 1, "key": "config.customer.id"})
    job = enqueue("test.noop", {"customer": {"id": 42}}, queue="crm")
    assert Job.objects.get(pk=job.pk).flow_key == job.flow_key == "42"
    assert enqueue("test.noop", {"x": 1}, queue="crm", flow_key="acme").flow_key == "acme"
    assert enqueue("test.noop", {}, queue="default").flow_key is None
    ids = enqueue_many("test.noop", [{"customer": {"id": i}} for i in ("a", 7)], queue="crm")
    assert [Job.objects.get(pk=i).flow_key for i in ids] == ["a", "7"]


def test_windowed_and_debounced_jobs_carry_their_flow_key(queues):
    queues(crm={"per_key": 1, "key": "config.customer.id"})
    windowed = enqueue(
        "test.noop", {"customer": {"id": 1}}, queue="crm", unique_key="w", unique_for=60
    )
    debounced = enqueue(
        "test.noop", {"customer": {"id": 2}}, queue="crm", debounce=60, debounce_key="d"
    )
    merged = enqueue(
        "test.noop", {"customer": {"id": 2}}, queue="crm", debounce=60, debounce_key="d"
    )
    assert merged.pk == debounced.pk
    assert Job.objects.get(pk=windowed.pk).flow_key == "1"
    assert Job.objects.get(pk=debounced.pk).flow_key == "2"


@pytest.mark.parametrize("config", [{}, {"customer": {}}, {"customer": {"id": True}}])
def test_a_missing_key_is_refused_before_any_sql(queues, config):
    queues(crm={"per_key": 1, "key": "config.customer.id"})
    with pytest.raises(InvalidJobOption, match="flow key"):
        enqueue("test.noop", config, queue="crm")
    with pytest.raises(InvalidJobOption, match="flow key"):
        enqueue_many("test.noop", [{"customer": {"id": 1}}, config], queue="crm")
    assert Job.objects.count() == 0


def test_the_unlimited_claim_leaves_declared_queues_alone(queues):
    queues(crm={"rate": "100/s", "burst": 3})
    enqueue_many("test.noop", [{}] * 3, queue="crm")
    enqueue_many("test.noop", [{}] * 2, queue="default")
    rows = queries.claim(worker_id="w", types=TYPES, queues=None, limit=50, lease_seconds=30)
    assert {r.queue for r in rows} == {"default"}
    assert len(claim().rows) == 3


def test_per_key_limit_counts_running_jobs_of_each_key(queues):
    queues(crm={"per_key": 2, "key": "config.c"})
    enqueue_many("test.noop", [{"c": c} for c in "aaaaabbbc"], queue="crm")
    first = claim().rows
    assert sorted(r.flow_key for r in first) == ["a", "a", "b", "b", "c"]
    assert claim().rows == []  # every key at its limit
    finish([r for r in first if r.flow_key == "a"][:1])
    assert [r.flow_key for r in claim().rows] == ["a"]


def test_keys_take_turns_within_the_threads(queues):
    """Limit 2 of 3 keys, each with work: the first claim's heads, then the cursor moves on."""
    queues(crm={"per_key": 5, "key": "config.c"})
    enqueue_many("test.noop", [{"c": c} for c in "aaabbbccc"], queue="crm")
    first = claim(limit=2).rows
    assert sorted(r.flow_key for r in first) == ["a", "b"]
    second = claim(limit=2, after="b").rows
    assert [r.flow_key for r in second][0] == "c"


def test_a_cursor_past_the_last_key_starts_again_from_the_first(queues):
    """The claim after a full one (its cursor on the last key) serves the keys from the first."""
    queues(crm={"concurrency": 10, "key": "config.c"})
    enqueue_many("test.noop", [{"c": "a"}] * 4 + [{"c": "b"}] * 4, queue="crm")
    assert sorted(r.flow_key for r in claim(limit=2, after="b").rows) == ["a", "b"]
    assert sorted(r.flow_key for r in claim(limit=8, after="zz").rows) == ["a"] * 3 + ["b"] * 3


def test_rate_allows_burst_then_one_start_per_period(queues):
    queues(crm={"rate": "2/s", "burst": 3})
    enqueue_many("test.noop", [{}] * 10, queue="crm")
    got = claim()
    assert len(got.rows) == 3  # the burst
    assert got.next_start_in is not None and 0.3 < got.next_start_in <= 0.5
    held = claim()
    assert held.rows == [] and held.next_start_in is not None
    # a token per 0.5 s: move the arrival time back by one period instead of sleeping
    sql("UPDATE pgjobs_rate SET tat = tat - interval '0.5 second'")
    assert len(claim().rows) == 1


def test_rate_per_key_has_a_bucket_per_key(queues):
    queues(crm={"rate": "1/m", "rate_per_key": True, "key": "config.c"})
    enqueue_many("test.noop", [{"c": c} for c in "aabbc"], queue="crm")
    assert sorted(r.flow_key for r in claim().rows) == ["a", "b", "c"]
    assert claim().rows == []
    assert sql_one("SELECT count(*) FROM pgjobs_rate WHERE queue = 'crm'") == 3


def test_retries_spend_tokens_and_nothing_is_refunded(queues):
    queues(crm={"rate": "1/h"})
    job = enqueue("test.noop", {}, queue="crm")
    [row] = claim().rows
    sql(  # as a retry would: back to PENDING, due now
        "UPDATE pgjobs_job SET status='PENDING', lease_token=NULL, lease_expires_at=NULL "
        "WHERE id=%s",
        [job.id],
    )
    assert row.id == job.id
    assert claim().rows == []


def test_the_queue_row_wins_over_the_settings(queues):
    queues(crm={"per_key": 1, "key": "config.c"})
    enqueue_many("test.noop", [{"c": "a"}] * 4, queue="crm")
    Queue.objects.create(name="crm", per_key_limit=3)
    assert len(claim().rows) == 3
    Queue.objects.filter(name="crm").update(paused=True)
    Queue.objects.filter(name="crm").update(per_key_limit=None)
    assert claim().rows == []


def test_a_row_alone_controls_a_queue_not_declared():
    enqueue_many("test.noop", [{}] * 5, queue="emails")
    Queue.objects.create(name="emails", rate=1 / 3600, burst=2)
    assert queries.claim(worker_id="w", types=TYPES, queues=None, limit=9, lease_seconds=30) == []
    assert len(claim("emails").rows) == 2


def test_cap_and_keys_together(queues):
    queues(crm={"concurrency": 3, "per_key": 2, "key": "config.c"})
    enqueue_many("test.noop", [{"c": c} for c in "aaabbb"], queue="crm")
    assert len(claim().rows) == 3
    assert claim().rows == []


def test_keyless_jobs_form_one_line(queues):
    """Jobs enqueued before the queue had a key path run too (one line, no per-key limit)."""
    enqueue_many("test.noop", [{}] * 2, queue="crm")
    queues(crm={"per_key": 1, "key": "config.c"})
    enqueue_many("test.noop", [{"c": "a"}] * 2, queue="crm")
    assert sorted(r.flow_key or "-" for r in claim().rows) == ["-", "-", "a"]


def done(row, token=None):
    return Completion(
        id=row.id, token=token or row.lease_token, attempt=row.attempts, status="COMPLETED"
    )


def finalize_and_claim(completions, names, limit=50, using=None):
    wanted = [ControlledQueue(n, flow.queues().get(n, flow.FlowSettings())) for n in names]
    return queries.finalize_and_claim_controlled(
        completions,
        wanted,
        worker_id="w",
        types=TYPES,
        limit=limit,
        lease_seconds=30,
        using=using,
    )


# Each way the statements travel: prepared in one pipeline, one multi-statement query (not
# prepared), one statement per query in a transaction (Django's server-side binding).
PATHS = [
    pytest.param(True, None, id="pipelined"),
    pytest.param(False, None, id="multi-statement"),
    pytest.param(False, "server_binding", id="server-side-binding"),
]


@pytest.mark.django_db(transaction=True, databases=["default", "server_binding"])
@pytest.mark.parametrize(("prepared", "using"), PATHS)
def test_the_ended_run_rides_in_the_claim_and_frees_its_keys_slot(
    settings, queues, prepared, using
):
    """The finalize runs before the queue's lock in the same round trip: the claim after it
    sees the key's slot free; a stale finalize (a lost lease) writes nothing."""
    settings.PGJOBS = {**settings.PGJOBS, "PREPARED_STATEMENTS": prepared}
    queues(crm={"per_key": 1, "key": "config.c"})
    enqueue_many("test.noop", [{"c": "a"}] * 3, queue="crm")
    [first] = claim().rows
    written, [got] = finalize_and_claim([done(first)], ["crm"], using=using)
    assert written == {first.id}
    assert Job.objects.get(pk=first.id).status == "COMPLETED"
    [second] = got.rows
    assert second.flow_key == "a" and second.id != first.id
    stale = done(second, token="00000000-0000-0000-0000-000000000000")
    written, [got] = finalize_and_claim([stale], ["crm"], using=using)
    assert written == set() and got.rows == []  # the key's one slot is still held
    assert Job.objects.get(pk=second.id).status == "RUNNING"


@pytest.mark.django_db(transaction=True, databases=["default", "server_binding"])
@pytest.mark.parametrize(("prepared", "using"), PATHS)
def test_controlled_queues_claimed_together_share_the_free_threads(
    settings, queues, prepared, using
):
    """One transaction claims every controlled queue, in name order: each claims what the
    ones before it left of the limit; the answers come back in the order asked."""
    settings.PGJOBS = {**settings.PGJOBS, "PREPARED_STATEMENTS": prepared}
    queues(a_q={"concurrency": 10}, b_q={"concurrency": 10}, c_q={"concurrency": 10})
    for name in ("a_q", "b_q", "c_q"):
        enqueue_many("test.noop", [{}] * 2, queue=name)
    _, (c, a, b) = finalize_and_claim([], ["c_q", "a_q", "b_q"], limit=3, using=using)
    assert [len(a.rows), len(b.rows), len(c.rows)] == [2, 1, 0]
    assert {r.queue for r in a.rows} == {"a_q"} and {r.queue for r in b.rows} == {"b_q"}
    _, (c, a, b) = finalize_and_claim([], ["c_q", "a_q", "b_q"], limit=9, using=using)
    assert [len(a.rows), len(b.rows), len(c.rows)] == [0, 1, 2]


def test_the_controlled_claim_keeps_custom_plans_until_generic_plans_are_on(queues):
    """Prepared, PostgreSQL would switch the claim to a generic plan after five executions,
    made from whatever the statistics say then (an empty table: whole-table scans later)."""
    queues(crm={"per_key": 1, "key": "config.c"})
    enqueue_many("test.noop", [{"c": f"k{i}"} for i in range(20)], queue="crm")
    for _ in range(10):
        finish(claim(limit=2).rows)
    plans = sql(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE '%%WITH RECURSIVE ctl AS%%'"
    )
    assert plans == [(0, 10)]


def test_a_finalize_in_the_controlled_claim_fans_in(queues):
    """Workflow fan-in runs in this path's finalize too: the next step becomes claimable."""
    queues(crm={"concurrency": 5})
    run = chain(job("test.noop", {}, queue="crm"), job("test.noop", {}, queue="crm")).enqueue()
    [first] = claim().rows
    assert first.id == run["1"][0]
    written, [got] = finalize_and_claim([done(first)], ["crm"])
    assert written == {first.id}
    assert [r.id for r in got.rows] == run["2"]


def run(*args):
    out = io.StringIO()
    call_command("pgjobs_queue", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_command_sets_the_rows_controls_and_refuses_bad_values():
    assert "at most 2 running per key" in run("per-key", "crm", "2")
    assert "rate 10/s per key, burst 3" in run("rate", "crm", "600/m", "--burst", "3", "--per-key")
    row = Queue.objects.get(name="crm")
    assert (row.per_key_limit, row.rate, row.burst, row.rate_per_key) == (2, 10.0, 3, True)
    for args in (
        ("per-key", "crm", "0"),
        ("rate", "crm", "0/s"),
        ("rate", "crm", "fast"),
        ("rate", "crm", "1/s", "--burst", "0"),
        ("rate", "crm", "none", "--burst", "2"),
        ("per-key", "bad name!", "1"),
    ):
        with pytest.raises(CommandError):
            run(*args)
    assert "rate removed" in run("rate", "crm", "none")
    assert Queue.objects.get(name="crm").rate is None


def test_list_shows_limits_rate_and_what_holds_jobs_back(queues):
    queues(crm={"per_key": 1, "key": "config.c"}, api={"rate": "1/h", "burst": 2})
    enqueue_many("test.noop", [{"c": "a"}] * 3 + [{"c": "b"}], queue="crm")
    enqueue_many("test.noop", [{}] * 5, queue="api")
    claim("crm")
    claim("api")
    lines = {line.split()[0]: line for line in run("list").splitlines()}
    assert lines["crm"].split()[3:] == ["1", "-", "2", "0", "2", "2", "-", "key"], lines["crm"]
    assert lines["api"].split()[3:] == ["-", "1/h+2", "3", "0", "2", "3", "-", "rate"], lines["api"]


def test_dashboard_and_queue_page_show_flow_controls_and_why_jobs_wait(queues, admin_client):
    queues(crm={"per_key": 1, "key": "config.c"}, api={"rate": "1/h"})
    enqueue_many("test.noop", [{"c": "a"}] * 3, queue="crm")
    enqueue_many("test.noop", [{}] * 2, queue="api")
    claim("crm")
    claim("api")
    page = admin_client.get("/admin/django_pgjobs/dashboard/").content.decode()
    assert "1 per key" in page and "rate 1/h" in page
    assert "2 (key)" in page and "1 (rate)" in page
    listing = admin_client.get("/admin/django_pgjobs/queue/").content.decode()
    assert "2 (key)" in listing and "1 (rate)" in listing
