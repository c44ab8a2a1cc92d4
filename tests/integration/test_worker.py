"""The worker loop in-process (the real code, burst mode): outcomes, retries, limits, trace."""

import io
import logging
import re
import time

import pytest

from django_pgjobs import (
    JobStatus,
    db,
    enqueue,
    enqueue_many,
    handler,
    health_checks,
    queries,
    registry,
)
from django_pgjobs.models import Job
from django_pgjobs.models import Worker as WorkerRow
from django_pgjobs.tracing import TraceIdFilter, current_trace_id
from tests.conftest import eventually, run_worker, sql
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


run = run_worker


def drain(timeout=20.0, **overrides):
    """Run burst workers until no job is pending or running (retries have short backoff)."""

    def settled():
        run(**overrides)
        return not Job.objects.filter(status__in=["PENDING", "RUNNING"]).exists()

    eventually(settled, timeout=timeout, interval=0.05, message="queue drained")


def test_completes_and_records_result_and_duration():
    job = enqueue("test.behave", {"do": "sleep", "seconds": 0.05}, trace_id="t-1")
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.result == {"did": "sleep", "attempt": 1}
    assert job.duration_ms >= 50 and job.finished_at >= job.started_at
    assert job.error is None and job.lease_token is None and job.attempts == 1


def test_flaky_job_succeeds_on_its_third_attempt():
    job = enqueue("test.behave", {"do": "flaky", "fail_times": 2})
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 3)
    assert [h["outcome"] for h in job.history] == ["retry", "retry"]
    assert "flaky failure on attempt 2" in job.history[1]["error"]
    assert job.error is None


def test_raising_job_is_dead_lettered_after_max_attempts():
    job = enqueue("test.behave", {"do": "raise", "message": "bad row 7"})
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 3)
    assert "Traceback" in job.error and "ValueError: bad row 7" in job.error
    assert len(job.history) == 3 and job.history[-1]["outcome"] == "attempts_exhausted"
    assert Execution.objects.filter(job_id=job.id).count() == 3


def test_fail_skips_the_retries():
    job = enqueue("test.behave", {"do": "fail"})
    run()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
    assert "given up on purpose" in job.error


def test_retry_with_explicit_delay():
    job = enqueue("test.behave", {"do": "retry", "seconds": 300})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.attempts == 1
    wait = (job.run_after - job.updated_at).total_seconds()
    assert wait == pytest.approx(300, abs=1)


def test_item_errors_end_completed_with_errors():
    job = enqueue("test.behave", {"do": "items", "n": 4})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED_WITH_ERRORS
    assert job.result["processed"] == 4
    assert [e["item"] for e in job.result["errors"]] == [1, 3]


@pytest.mark.parametrize("do", ["system_exit", "keyboard_interrupt"])
def test_base_exceptions_do_not_kill_the_worker(do):
    bad = enqueue("test.behave", {"do": do})
    good = enqueue("test.behave", {"do": "ok"})
    run()
    bad.refresh_from_db()
    good.refresh_from_db()
    assert good.status == JobStatus.COMPLETED
    # The first attempt was recorded as a retry; on a loaded machine the burst may reach the
    # retry (due at once under the test settings) too, which ends the same way.
    first = bad.history[0]
    assert (first["attempt"], first["outcome"]) == (1, "retry"), bad.history
    name = "SystemExit" if do == "system_exit" else "KeyboardInterrupt"
    assert name in first["error"] and name in bad.error
    assert bad.status in (JobStatus.PENDING, JobStatus.FAILED)


def test_unregistered_type_in_the_table_is_never_run():
    sql("INSERT INTO pgjobs_job (type, config) VALUES ('os.system', '{\"cmd\": \"touch /tmp/x\"}')")
    enqueue("test.noop", {})
    run()
    assert Job.objects.get(type="os.system").status == JobStatus.PENDING
    assert Job.objects.get(type="test.noop").status == JobStatus.COMPLETED
    assert health_checks.unknown_due_types(registry.registered_types()) == [("os.system", 1)]


def test_non_json_result_fails_clearly():
    job = enqueue("test.behave", {"do": "bad_result"})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "not JSON" in job.error


def test_huge_error_is_truncated(settings):
    job = enqueue("test.behave", {"do": "huge_error"})
    run()
    job.refresh_from_db()
    assert len(job.error) <= 16 * 1024 + 100 and "characters truncated" in job.error


def test_huge_result_is_not_stored_whole():
    job = enqueue("test.behave", {"do": "huge_result"})
    run()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.result == {"result_truncated": True, "result_bytes": job.result["result_bytes"]}
    assert job.result["result_bytes"] > 3_000_000


def test_async_handler():
    job = enqueue("test.async", {"n": 7})
    run()
    job.refresh_from_db()
    assert job.result == {"async": True, "n": 7}


def test_handler_sees_trace_id_and_logs_carry_it(caplog):
    seen = {}

    @handler("test.trace")
    def trace(job):
        seen["ctx"] = current_trace_id.get()
        logging.getLogger("myapp").warning("inside the job")
        enqueue("test.noop", {})  # a child job inherits the trace
        return None

    try:
        filt = TraceIdFilter()
        caplog.handler.addFilter(filt)
        enqueue("test.trace", {}, trace_id="trace-xyz")
        run()
    finally:
        registry.unregister("test.trace")
        caplog.handler.removeFilter(filt)
    assert seen["ctx"] == "trace-xyz"
    record = next(r for r in caplog.records if r.getMessage() == "inside the job")
    assert record.trace_id == "trace-xyz"
    assert Job.objects.get(type="test.noop").trace_id == "trace-xyz"


def test_timeout_gives_the_slot_back_and_retries(settings):
    @handler("test.slow", timeout=0.3, max_attempts=1)
    def slow(job):
        time.sleep(1.5)  # the handler's run: time under test, past its 0.3 s timeout

    try:
        job = enqueue("test.slow", {})
        other = enqueue("test.noop", {})
        run(concurrency=2, lease_seconds=0.6)  # heartbeat (and timeout checks) every 0.2 s
    finally:
        registry.unregister("test.slow")
    job.refresh_from_db()
    other.refresh_from_db()
    assert job.status == JobStatus.FAILED and "JobTimeout" in job.error
    assert other.status == JobStatus.COMPLETED


def test_cancel_request_reaches_the_running_handler():
    import threading

    job = enqueue("test.behave", {"do": "wait_cancel", "seconds": 10})
    t = threading.Thread(target=run, kwargs={"lease_seconds": 0.3})
    t.start()
    eventually(lambda: Job.objects.get(pk=job.id).status == "RUNNING")
    queries.cancel([job.id])
    t.join(15)
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED and job.result["cancelled"] is True
    assert job.duration_ms < 5000


def test_max_jobs_stops_after_n():
    enqueue_many("test.noop", [{}] * 5)
    worker = run(burst=False, max_jobs=3, concurrency=1)
    assert worker.finished_total == 3
    assert Job.objects.filter(status="COMPLETED").count() == 3


def test_queues_filter():
    a = enqueue("test.noop", {}, queue="a")
    b = enqueue("test.noop", {}, queue="b")
    run(queues=["b"])
    assert Job.objects.get(pk=a.id).status == "PENDING"
    assert Job.objects.get(pk=b.id).status == "COMPLETED"


def test_worker_row_is_removed_on_stop():
    enqueue("test.noop", {})
    run()
    assert not WorkerRow.objects.exists()


def test_priority_is_honoured_by_a_single_thread():
    order = []

    @handler("test.order")
    def record(job):
        order.append(job.config["n"])

    try:
        for n, prio in [(1, 0), (2, 50), (3, -50), (4, 50)]:
            enqueue("test.order", {"n": n}, priority=prio)
        run(concurrency=1)
    finally:
        registry.unregister("test.order")
    assert order == [2, 4, 1, 3]


@pytest.mark.django_db(transaction=True, databases=["default", "server_binding"])
@pytest.mark.parametrize("prepared", [True, False])
def test_worker_runs_on_a_server_side_binding_connection(settings, prepared):
    """DATABASES OPTIONS server_side_binding=True runs every job too, our statements prepared
    or not (then finalize and claim take two round trips)."""
    settings.PGJOBS = {"PREPARED_STATEMENTS": prepared}
    ok = enqueue("test.echo", {"n": 1}, using="server_binding")
    flaky = enqueue("test.behave", {"do": "flaky", "fail_times": 1}, using="server_binding")
    ids = enqueue_many("test.noop", [{}] * 30, using="server_binding")

    def settled():
        run(using="server_binding", concurrency=4)
        return not Job.objects.filter(status__in=["PENDING", "RUNNING"]).exists()

    eventually(settled, timeout=20, message="drained through server-side binding")
    assert Job.objects.get(pk=ok.id).result == {"echo": {"n": 1}}
    assert (Job.objects.get(pk=flaky.id).status, Job.objects.get(pk=flaky.id).attempts) == (
        JobStatus.COMPLETED,
        2,
    )
    assert Job.objects.filter(id__in=ids, status=JobStatus.COMPLETED).count() == 30


def test_a_short_job_type_that_runs_long_does_not_hold_back_its_batch():
    """Jobs of a type known to be short share one woken executor thread (no thread switch per
    job); when one of them stalls, the main loop wakes idle threads for the others."""
    import threading

    from django_pgjobs.worker import Worker, WorkerOptions

    gate = threading.Event()
    ran_on: dict[str, int] = {}

    @handler("test.quick")
    def quick(job):
        ran_on[job.config["name"]] = threading.get_ident()
        if job.config["name"] == "stall":
            assert gate.wait(10)

    try:
        enqueue("test.quick", {"name": "stall"}, priority=5)  # claimed first, in one batch
        enqueue_many("test.quick", [{"name": f"o{i}"} for i in range(3)])
        worker = Worker(
            WorkerOptions.from_settings(
                burst=True, listen=False, install_signal_handlers=False, concurrency=4
            )
        )
        worker.handoff.ran("test.quick", 0.00001)  # its runs so far were short
        t = threading.Thread(target=worker.run)
        t.start()
        try:
            eventually(
                lambda: Job.objects.filter(status="COMPLETED").count() == 3,
                timeout=10,
                message="the other jobs completed while the first one stalls",
            )
            assert Job.objects.get(config__name="stall").status == "RUNNING"
        finally:
            gate.set()
            t.join(15)
        assert not t.is_alive() and worker.exit_code == 0
    finally:
        registry.unregister("test.quick")
    assert Job.objects.filter(status="COMPLETED").count() == 4
    assert ran_on["stall"] not in {ran_on[f"o{i}"] for i in range(3)}


def test_a_batch_of_short_jobs_runs_on_one_executor_thread():
    import threading

    from django_pgjobs.worker import Worker, WorkerOptions

    threads: list[int] = []

    @handler("test.quick")
    def quick(job):
        threads.append(threading.get_ident())
        time.sleep(0.0002)  # lets go of the GIL, like a short query: woken threads would run some

    try:
        enqueue_many("test.quick", [{}] * 8)
        worker = Worker(
            WorkerOptions.from_settings(
                burst=True, listen=False, install_signal_handlers=False, concurrency=8
            )
        )
        worker.handoff.ran("test.quick", 0.00001)
        worker.handoff.grace = 10.0  # never spread: this test is about the batch alone
        worker.handoff.short = 10.0  # a run slowed by a busy machine still counts as short
        assert worker.run() == 0
    finally:
        registry.unregister("test.quick")
    assert Job.objects.filter(status="COMPLETED").count() == 8
    assert len(threads) == 8 and len(set(threads)) == 1  # one claim, one woken thread


@pytest.mark.parametrize(("prepared", "pipeline"), [(True, True), (True, False), (False, True)])
def test_the_hot_path_with_and_without_prepared_statements(
    settings, monkeypatch, prepared, pipeline
):
    """Prepared: finalize and claim are planned once and pipelined (two round trips on a libpq
    without pipelines); not prepared (behind a pooler that cannot hold them): one
    multi-statement query. Same outcomes."""
    settings.PGJOBS = {"PREPARED_STATEMENTS": prepared}
    monkeypatch.setattr(db, "PIPELINE", pipeline)
    flaky = enqueue("test.behave", {"do": "flaky", "fail_times": 1})
    ids = enqueue_many("test.echo", [{"n": i} for i in range(30)])
    drain(concurrency=4)
    assert Job.objects.filter(id__in=ids, status=JobStatus.COMPLETED).count() == 30
    assert Job.objects.get(pk=ids[7]).result == {"echo": {"n": 7}}
    assert Job.objects.get(pk=flaky.id).status == JobStatus.COMPLETED
    statements = sql("SELECT statement FROM pg_prepared_statements")  # this thread ran the worker
    assert any("jsonb_to_recordset" in s for (s,) in statements) is prepared
    assert any("FOR UPDATE SKIP LOCKED" in s for (s,) in statements) is prepared


def test_the_handler_sees_its_lease_token_as_a_uuid():
    """The worker carries the token as text (it only goes back to the database); handlers
    still read a UUID, the one in the row while the job runs."""
    import uuid

    seen = {}

    @handler("test.lease")
    def lease(job):
        seen["token"] = job.lease_token
        seen["row"] = sql("SELECT lease_token FROM pgjobs_job WHERE id = %s", [job.id])[0][0]

    try:
        enqueue("test.lease", {})
        run()
    finally:
        registry.unregister("test.lease")
    assert isinstance(seen["token"], uuid.UUID) and seen["token"] == seen["row"]


@pytest.mark.parametrize("stock_logger", [True, False], ids=["built-by-hand", "logger.info"])
def test_one_info_record_per_outcome_names_its_job(caplog, monkeypatch, stock_logger):
    """The per-job success line is built by hand (no stack search) with the standard Logger
    class, through logger.info() with a project's own: the same record either way."""
    from django_pgjobs.worker import completer

    monkeypatch.setattr(completer, "_STOCK_LOGGER", stock_logger)
    ok = enqueue("test.noop", {}, trace_id="trace-ok")
    with_errors = enqueue("test.behave", {"do": "items", "n": 2})
    with caplog.at_level(logging.INFO, logger="django_pgjobs.worker"):
        run()
    done = {r.job_id: r for r in caplog.records if getattr(r, "action", "").startswith("job.")}
    record = done[ok.id]
    assert record.levelno == logging.INFO and record.name == "django_pgjobs.worker"
    assert record.getMessage() == (
        f"job.completed test.noop#{ok.id} queue=default attempt=1/5 duration_ms="
        f"{Job.objects.get(pk=ok.id).duration_ms} trace_id=trace-ok"
    )
    assert (record.action, record.job_type, record.trace_id) == (
        "job.completed",
        "test.noop",
        "trace-ok",
    )
    assert record.funcName == "_log_finished" and record.pathname.endswith("worker/completer.py")
    assert done[with_errors.id].action == "job.completed_with_errors"
    caplog.clear()
    enqueue("test.noop", {})
    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        run()
    assert not [r for r in caplog.records if getattr(r, "action", "") == "job.completed"]


@pytest.fixture
def runjobs_console():
    """runjobs' console handler as the only one for django_pgjobs' records (as without a
    LOGGING of the project's), writing to a string."""
    from django_pgjobs.worker import console

    pkg = logging.getLogger("django_pgjobs")
    saved = (pkg.handlers[:], pkg.level, pkg.propagate)
    handler = console.ConsoleHandler()
    handler.setStream(io.StringIO())
    pkg.handlers[:], pkg.propagate = [handler], False
    pkg.setLevel(logging.INFO)
    yield handler
    pkg.handlers[:], pkg.propagate = saved[0], saved[2]
    pkg.setLevel(saved[1])


def run_alone(handler):
    """run(), the handler alone on django_pgjobs' logger: pytest adds its capture handlers to
    every non-propagating logger as each test phase starts."""
    logging.getLogger("django_pgjobs").handlers[:] = [handler]
    run()


def test_runjobs_console_gets_each_outcome_once_the_successes_a_batch_at_a_time(
    runjobs_console, monkeypatch
):
    from django_pgjobs.worker import console

    batches = []
    write = console.ConsoleHandler.write_messages
    monkeypatch.setattr(
        console.ConsoleHandler,
        "write_messages",
        lambda self, *a: (batches.append(a[2]), write(self, *a)),
    )
    ok = enqueue("test.noop", {}, trace_id="trace-ok")
    with_errors = enqueue("test.behave", {"do": "items", "n": 2})
    failed = enqueue("test.behave", {"do": "fail"})
    more = enqueue_many("test.noop", [{}] * 5)
    run_alone(runjobs_console)
    lines = runjobs_console.stream.getvalue().splitlines()
    row = {r[0]: r[1:] for r in Job.objects.values_list("id", "max_attempts", "duration_ms")}

    def success(id, type="test.noop", action="job.completed", trace="None"):
        return (
            f"{action} {type}#{id} queue=default attempt=1/{row[id][0]} "
            f"duration_ms={row[id][1]} trace_id={trace}"
        )

    successes = [
        success(ok.id, trace="trace-ok"),
        success(with_errors.id, "test.behave", "job.completed_with_errors"),
        *map(success, more),
    ]
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
    for message in successes:  # the standard format, once each
        assert [
            ln
            for ln in lines
            if re.fullmatch(stamp + "INFO django_pgjobs.worker " + re.escape(message), ln)
        ], (message, lines)
    assert sum("job.completed" in ln for ln in lines) == len(successes)
    assert sorted(m for batch in batches for m in batch) == sorted(successes)  # not one by one
    assert [
        ln
        for ln in lines
        if re.fullmatch(
            stamp + f"ERROR django_pgjobs.worker job.failed test.behave#{failed.id} .*", ln
        )
    ]


def test_a_filter_on_runjobs_console_still_sees_every_record(runjobs_console):
    runjobs_console.addFilter(lambda record: getattr(record, "action", "") != "job.completed")
    ok = enqueue("test.noop", {})
    failed = enqueue("test.behave", {"do": "fail"})
    run_alone(runjobs_console)
    text = runjobs_console.stream.getvalue()
    assert f"#{ok.id} " not in text and f"job.failed test.behave#{failed.id} " in text


def test_job_started_is_logged_at_debug_only(caplog):
    enqueue("test.noop", {})
    with caplog.at_level(logging.INFO, logger="django_pgjobs.worker"):
        run()
    assert not [r for r in caplog.records if getattr(r, "action", "") == "job.started"]
    enqueue("test.noop", {})
    with caplog.at_level(logging.DEBUG, logger="django_pgjobs.worker"):
        run()
    (started,) = [r for r in caplog.records if getattr(r, "action", "") == "job.started"]
    assert started.levelno == logging.DEBUG and started.job_type == "test.noop"
