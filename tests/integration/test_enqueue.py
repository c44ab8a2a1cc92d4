"""enqueue/enqueue_many against real PostgreSQL: transactions, NOTIFY, validation, options."""

from datetime import timedelta

import psycopg
import pytest
from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, ProgrammingError, connection, transaction
from django.utils import timezone

from django_pgjobs import (
    ConfigTooLarge,
    InvalidJobConfig,
    InvalidJobOption,
    JobStatus,
    UnknownJobType,
    doorbell,
    enqueue,
    enqueue_many,
    queries,
    signals,
)
from django_pgjobs.models import Job
from django_pgjobs.tracing import current_trace_id
from tests.conftest import logged_sql, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_returns_the_saved_job():
    job = enqueue(
        "test.echo",
        {"file": "orders.csv"},
        queue="imports",
        priority=5,
        trace_id="abc",
        tenant_id=42,
        operated_by="user:7",
    )
    row = Job.objects.get(pk=job.id)
    assert (row.type, row.queue, row.priority, row.status) == ("test.echo", "imports", 5, "PENDING")
    assert row.config == {"file": "orders.csv"}
    assert (row.trace_id, row.tenant_id, row.operated_by) == ("abc", "42", "user:7")
    assert row.attempts == 0 and row.max_attempts == 5
    assert job.created_at == row.created_at and job.run_after == row.run_after


def test_job_enqueued_reaches_its_receivers():
    seen = []

    def receiver(sender, job, **kwargs):
        seen.append((sender, job.id, job.config))

    signals.job_enqueued.connect(receiver)
    try:
        job = enqueue("test.echo", {"n": 1})
    finally:
        signals.job_enqueued.disconnect(receiver)
    enqueue("test.echo", {"n": 2})
    assert seen == [("test.echo", job.id, {"n": 1})]


def test_handler_defaults_apply():
    job = enqueue("test.behave", {"do": "ok"})
    assert Job.objects.get(pk=job.id).max_attempts == 3


def test_rollback_means_the_job_never_existed():
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("test.echo", {"n": 1})
        raise RuntimeError("business failure")
    assert Job.objects.count() == 0


def test_savepoint_rollback_keeps_outer_jobs():
    with transaction.atomic():
        kept = enqueue("test.echo", {"n": 1})
        try:
            with transaction.atomic():
                enqueue("test.echo", {"n": 2})
                raise RuntimeError
        except RuntimeError:
            pass
    assert list(Job.objects.values_list("id", flat=True)) == [kept.id]


def _listen(sleeping: bool = True):
    """A LISTEN connection; ``sleeping``: it holds the doorbell's sleeper lock, as a worker
    that sleeps does (enqueue rings only then)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute("LISTEN pgjobs")
    if sleeping:
        assert conn.execute(doorbell.arm_sql("pgjobs")).fetchone()[0]
    return conn


def test_no_notify_while_no_worker_sleeps():
    listener = _listen(sleeping=False)
    try:
        enqueue("test.echo", {}, queue="emails")
        enqueue_many("test.echo", [{}] * 3, queue="emails")
        assert list(listener.notifies(timeout=0.3)) == []
        listener.execute(doorbell.arm_sql("pgjobs"))
        enqueue("test.echo", {}, queue="emails")
        assert [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)] == ["emails"]
        listener.execute(doorbell.DISARM_SQL)
        job = enqueue("test.echo", {}, queue="emails")
        queries.duplicate([job.id])  # the admin's "run again": the same rule
        assert list(listener.notifies(timeout=0.3)) == []
        listener.execute(doorbell.arm_sql("pgjobs"))
        queries.duplicate([job.id])
        assert [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)] == ["emails"]
    finally:
        listener.close()


def test_notify_is_sent_on_commit_only():
    listener = _listen()
    try:
        with transaction.atomic():
            enqueue("test.echo", {}, queue="emails")
            assert list(listener.notifies(timeout=0.3)) == []
        notes = list(listener.notifies(timeout=2.0, stop_after=1))
        assert [n.payload for n in notes] == ["emails"]
    finally:
        listener.close()


def test_delayed_job_sends_no_notify():
    listener = _listen()
    try:
        enqueue("test.echo", {}, run_after=timedelta(hours=1))
        assert list(listener.notifies(timeout=0.3)) == []
    finally:
        listener.close()


def test_relative_run_after_uses_the_database_clock():
    job = enqueue("test.echo", {}, run_after=timedelta(minutes=10))
    delta = sql_one(
        "SELECT extract(epoch FROM run_after - created_at) FROM pgjobs_job WHERE id=%s", [job.id]
    )
    assert 599 <= float(delta) <= 601


def test_absolute_run_after():
    when = timezone.now() + timedelta(days=1)
    job = enqueue("test.echo", {}, run_after=when)
    assert Job.objects.get(pk=job.id).run_after == when


def test_naive_run_after_is_refused_with_use_tz():
    with pytest.raises(InvalidJobOption, match="naive datetime"):
        enqueue("test.echo", {}, run_after=timezone.now().replace(tzinfo=None))


def test_unknown_type_is_refused_and_the_transaction_stays_usable():
    with transaction.atomic():
        with pytest.raises(UnknownJobType, match="'nope'.*Registered types: .*test.echo"):
            enqueue("nope", {})
        ok = enqueue("test.echo", {})  # the same transaction goes on
    assert Job.objects.filter(pk=ok.id).exists()


@pytest.mark.parametrize(
    "config",
    [{"x": float("nan")}, {"x": "\x00"}, {"x": "\udc80"}, {"x": timezone.now()}, {"x": object()}],
)
def test_non_json_config_is_refused_before_sql(config):
    with transaction.atomic():
        with pytest.raises(InvalidJobConfig):
            enqueue("test.echo", config)
        assert sql_one("SELECT 1") == 1
    assert Job.objects.count() == 0


def test_oversized_config_is_refused(settings):
    settings.PGJOBS = {**settings.PGJOBS, "MAX_CONFIG_BYTES": 10_000}
    with pytest.raises(ConfigTooLarge, match="over the 10,000-byte limit"):
        enqueue("test.echo", {"blob": "x" * 20_000})
    enqueue("test.echo", {"blob": "x" * 5_000})


def test_default_limit_is_one_mebibyte():
    with pytest.raises(ConfigTooLarge):
        enqueue("test.echo", {"blob": "x" * (1024 * 1024)})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queue": "bad queue"}, "invalid queue name"),
        ({"priority": 1000}, "out of range"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"run_after": "tomorrow"}, "run_after"),
        ({"trace_id": "x" * 300}, "trace_id"),
    ],
)
def test_bad_options_are_refused(kwargs, match):
    with pytest.raises(InvalidJobOption, match=match):
        enqueue("test.echo", {}, **kwargs)


def test_trace_id_comes_from_the_context():
    token = current_trace_id.set("from-request")
    try:
        job = enqueue("test.echo", {})
    finally:
        current_trace_id.reset(token)
    assert Job.objects.get(pk=job.id).trace_id == "from-request"


def test_the_database_picks_ids():
    with pytest.raises(ProgrammingError, match="GENERATED ALWAYS"), transaction.atomic():
        sql("INSERT INTO pgjobs_job (id, type) VALUES (999, 'x')")


def test_check_constraint_refuses_unknown_status():
    job = enqueue("test.echo", {})
    with pytest.raises(IntegrityError, match="pgjobs_job_status_valid"), transaction.atomic():
        sql("UPDATE pgjobs_job SET status='DONE' WHERE id=%s", [job.id])


@pytest.mark.parametrize(
    "status, token, expires, ok",
    [
        ("RUNNING", True, True, True),
        ("RUNNING", False, True, False),  # running without a lease
        ("RUNNING", True, False, False),  # a lease that never expires
        ("PENDING", True, True, False),  # a lease on a job nobody runs
        ("COMPLETED", True, False, False),
        ("COMPLETED", False, True, True),  # an expiry alone is harmless: nothing matches on it
        ("FAILED", False, False, True),
    ],
)
def test_check_constraint_ties_the_lease_to_running(status, token, expires, ok):
    job = enqueue("test.echo", {})
    update = (
        "UPDATE pgjobs_job SET status=%s, "
        "lease_token=CASE WHEN %s THEN gen_random_uuid() END, "
        "lease_expires_at=CASE WHEN %s THEN now() END WHERE id=%s"
    )
    if ok:
        sql(update, [status, token, expires, job.id])
        assert Job.objects.get(pk=job.id).status == status
    else:
        with (
            pytest.raises(IntegrityError, match="pgjobs_job_lease_iff_running"),
            transaction.atomic(),
        ):
            sql(update, [status, token, expires, job.id])


def test_the_model_validates_the_same_rules():
    """Django's own validation (ModelForm, full_clean) runs the CHECKs' conditions too."""
    job = Job(type="x", status="DONE")
    with pytest.raises(ValidationError, match="pgjobs_job_status_valid"):
        job.validate_constraints()
    job = Job(type="x", status=JobStatus.RUNNING)  # no lease
    with pytest.raises(ValidationError, match="pgjobs_job_lease_iff_running"):
        job.validate_constraints()
    Job(type="x", status=JobStatus.PENDING).validate_constraints()


@pytest.mark.parametrize("name", ["a b", "-lead", ".lead", "", "ok\n", "é"])
def test_check_constraint_refuses_bad_queue_from_raw_sql(name):
    with pytest.raises(IntegrityError, match="pgjobs_job_queue_name"), transaction.atomic():
        sql("INSERT INTO pgjobs_job (type, queue) VALUES ('x', %s)", [name])


def test_the_database_takes_the_queue_names_enqueue_takes():
    """Same rule on both sides: the constraint's regex, plus the varchar(63) for the length."""
    sql("INSERT INTO pgjobs_job (type, queue) VALUES ('x', %s)", ["_a.b:c-" + "x" * 56])
    with pytest.raises(DataError, match="too long"), transaction.atomic():
        sql("INSERT INTO pgjobs_job (type, queue) VALUES ('x', %s)", ["q" * 64])


def test_enqueue_many_inserts_in_order():
    ids = enqueue_many("test.echo", [{"i": i} for i in range(12_000)], queue="bulk", priority=3)
    assert len(ids) == 12_000 and ids == sorted(ids)
    rows = sql("SELECT id, (config->>'i')::int, queue, priority FROM pgjobs_job ORDER BY id")
    assert [r[1] for r in rows] == list(range(12_000))
    assert {(r[2], r[3]) for r in rows} == {("bulk", 3)}


def test_enqueue_many_refuses_the_whole_batch_on_one_bad_config():
    with pytest.raises(InvalidJobConfig, match=r"configs\[2\]"):
        enqueue_many("test.echo", [{"i": 0}, {"i": 1}, {"i": float("inf")}])
    assert Job.objects.count() == 0


def test_enqueue_many_rolls_back_with_the_caller():
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many("test.echo", [{"i": i} for i in range(10)])
        raise RuntimeError
    assert Job.objects.count() == 0


def test_enqueue_many_gives_every_row_the_options_and_keeps_odd_text():
    configs = [
        {"s": "tab\there", "n": "line\nbreak", "b": "back\\slash \\N", "u": "é€😀"},
        {},
        {"nested": {"a": [1, {"b": None}]}},
    ]
    ids = enqueue_many(
        "test.echo",
        configs,
        queue="bulk",
        tenant_id="acme",
        trace_id="t-1",
        operated_by="ops",
        max_attempts=7,
        run_after=timedelta(minutes=5),
    )
    jobs = list(Job.objects.filter(id__in=ids).order_by("id"))
    assert [j.config for j in jobs] == configs
    assert {
        (
            j.type,
            j.queue,
            j.tenant_id,
            j.trace_id,
            j.operated_by,
            j.max_attempts,
            j.status,
            j.attempts,
        )
        for j in jobs
    } == {("test.echo", "bulk", "acme", "t-1", "ops", 7, JobStatus.PENDING, 0)}
    delay = sql_one("SELECT max(extract(epoch FROM run_after - created_at)) FROM pgjobs_job")
    assert 299 <= float(delay) <= 301


def test_enqueue_many_notifies_once_on_commit_and_not_for_delayed_jobs():
    listener = _listen()
    try:
        with transaction.atomic():
            enqueue_many("test.echo", [{}] * 3, queue="emails")
            enqueue_many("test.echo", [{}] * 3, queue="later", run_after=timedelta(hours=1))
            assert list(listener.notifies(timeout=0.3)) == []
        assert [n.payload for n in listener.notifies(timeout=1.0)] == ["emails"]
    finally:
        listener.close()


def test_unique_key_returns_the_active_job():
    first = enqueue("test.echo", {"n": 1}, unique_key="report:42")
    second = enqueue("test.echo", {"n": 2}, unique_key="report:42")
    assert second.id == first.id and second.deduplicated and not first.deduplicated
    Job.objects.filter(pk=first.id).update(status=JobStatus.COMPLETED)
    third = enqueue("test.echo", {"n": 3}, unique_key="report:42")
    assert third.id != first.id


# --- the INSERT prepared on the server (PGJOBS["PREPARED_STATEMENTS"]) -----------------------


def _prepared_inserts() -> int:
    return sql_one(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%INSERT INTO pgjobs_job%'"
    )


def test_enqueue_prepares_its_insert_once_per_connection():
    first = enqueue("test.echo", {"n": 1})
    enqueue("test.echo", {"n": 2}, trace_id="t-1", tenant_id=7)
    assert _prepared_inserts() == 1
    connection.close()  # a new connection prepares it again, and the cursor follows it
    third = enqueue("test.echo", {"n": 3})
    assert _prepared_inserts() == 1
    assert list(Job.objects.order_by("id").values_list("config", "trace_id", "tenant_id")) == [
        ({"n": 1}, None, None),
        ({"n": 2}, "t-1", "7"),
        ({"n": 3}, None, None),
    ]
    assert first.id < third.id


@pytest.mark.parametrize(
    ("setting", "disable_cursors", "prepared"),
    [("auto", True, 0), (False, False, 0), (True, True, 1), ("auto", False, 1)],
)
def test_prepared_statements_setting(settings, setting, disable_cursors, prepared):
    """ "auto" stays off behind what Django's docs set for a transaction-mode pooler."""
    settings.PGJOBS = {"PREPARED_STATEMENTS": setting}
    old = connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False)
    connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = disable_cursors
    try:
        connection.close()
        job = enqueue("test.echo", {"n": 1})
        assert _prepared_inserts() == prepared
        assert Job.objects.get(pk=job.id).config == {"n": 1}
    finally:
        connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = old


def test_prepared_insert_is_seen_by_django_instrumentation():
    from django.test.utils import CaptureQueriesContext

    seen = []

    def wrapper(execute, sql_text, params, many, context):
        seen.append(sql_text)
        return execute(sql_text, params, many, context)

    with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(wrapper):
        enqueue("test.echo", {"n": 1})
    assert len(queries.captured_queries) == 1
    assert "INSERT INTO pgjobs_job" in logged_sql(queries.captured_queries[0], seen[0])
    assert len(seen) == 1


def test_prepared_insert_respects_a_broken_transaction():
    from django.db import DatabaseError
    from django.db.transaction import TransactionManagementError

    with transaction.atomic():
        try:
            with transaction.atomic(savepoint=False), connection.cursor() as cur:
                cur.execute("SELECT 1/0")  # marks the outer block for rollback
        except DatabaseError:
            pass
        with pytest.raises(TransactionManagementError):
            enqueue("test.echo", {"n": 1})
        transaction.set_rollback(True)
    assert Job.objects.count() == 0


def test_prepared_insert_refuses_an_event_loop():
    import asyncio

    from django.core.exceptions import SynchronousOnlyOperation

    async def from_a_coroutine():
        enqueue("test.echo", {"n": 1})

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(from_a_coroutine())


def test_prepared_insert_returns_the_times_django_reads_back():
    job = enqueue("test.echo", {"n": 1})
    row = Job.objects.get(pk=job.id)
    assert job.created_at.utcoffset() is not None
    assert (job.created_at, job.run_after, job.updated_at) == (
        row.created_at,
        row.run_after,
        row.updated_at,
    )


def test_the_returned_job_is_the_row_read_back():
    job = enqueue("test.echo", {"n": 1}, trace_id="t-1", unique_key="k-1")
    row = Job.objects.get(pk=job.id)
    for field in Job._meta.concrete_fields:
        assert getattr(job, field.attname) == getattr(row, field.attname), field.attname
    assert job.get_deferred_fields() == set()
    assert (job._state.adding, job._state.db) == (False, "default")
    job.result = {"noted": True}
    job.save(update_fields=["result"])  # a normal saved instance: UPDATE, not INSERT
    assert Job.objects.get(pk=job.id).result == {"noted": True}
    assert Job.objects.count() == 1


def test_a_post_init_receiver_sees_the_returned_job():
    from django.db.models.signals import post_init

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        job = enqueue("test.echo", {"n": 1})
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [job] and seen[0] is job
    assert job.config == {"n": 1} and job.get_deferred_fields() == set()


def test_a_database_error_in_enqueue_is_djangos_and_the_transaction_rolls_back():
    sql("""CREATE FUNCTION pgjobs_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'refused by test' USING ERRCODE = 'check_violation'; END $$""")
    sql(
        "CREATE TRIGGER pgjobs_test_refuse BEFORE INSERT ON pgjobs_job "
        "FOR EACH ROW EXECUTE FUNCTION pgjobs_test_refuse()"
    )
    try:
        with pytest.raises(IntegrityError, match="refused by test"), transaction.atomic():
            enqueue("test.echo", {"n": 1})
        assert Job.objects.count() == 0  # the connection is usable again
    finally:
        sql("DROP TRIGGER pgjobs_test_refuse ON pgjobs_job")
        sql("DROP FUNCTION pgjobs_test_refuse()")


def test_a_sleeper_of_named_queues_is_rung_for_them_only():
    """S per queue (doorbell.py): a sleeper of b is rung by enqueues on b, not on a; one of
    every queue (S(*)) by both."""
    listener = _listen(sleeping=False)
    try:
        assert listener.execute(doorbell.arm_sql("pgjobs", ["b", "c"])).fetchone()[0]
        enqueue("test.echo", {}, queue="a")
        enqueue_many("test.echo", [{}] * 2, queue="a")
        assert list(listener.notifies(timeout=0.3)) == []
        enqueue("test.echo", {}, queue="c")
        enqueue_many("test.echo", [{}] * 2, queue="b")
        notes = [n.payload for n in listener.notifies(timeout=2.0, stop_after=2)]
        assert notes == ["c", "b"]
        listener.execute(doorbell.DISARM_SQL)
        assert listener.execute(doorbell.arm_sql("pgjobs", None)).fetchone()[0]
        enqueue("test.echo", {}, queue="a")
        assert [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)] == ["a"]
    finally:
        listener.close()


def test_a_dead_connection_fails_its_health_check_and_enqueue_reconnects(settings):
    """enqueue() skips Django's cursor wrapper but keeps its checks: with CONN_HEALTH_CHECKS a
    connection the server dropped is replaced before the INSERT, as Django's cursor() would."""
    enqueue("test.echo", {"n": 0})  # connected, our cursors made
    connection.health_check_enabled, connection.health_check_done = True, False
    old = connection.connection
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [old.info.backend_pid])
    job = enqueue("test.echo", {"n": 1})
    assert connection.connection is not old and connection.health_check_done
    assert Job.objects.get(pk=job.id).config == {"n": 1}
