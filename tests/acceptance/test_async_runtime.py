"""The async runtime (worker/aio.py) in real ``runjobs`` processes: ``async def`` handlers on one
event loop, hundreds in flight, with everything the thread runtime guarantees (docs/async.md).

The drain's job count is PGJOBS_ASYNC_JOBS (default 2,000, small enough for CI; the issue's
20,000: ``PGJOBS_ASYNC_JOBS=20000``).
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import call_command

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from django_pgjobs.operations import cancel
from tests.conftest import eventually

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 1.0
FAST = ("--lease", str(LEASE), "--reap-interval", "0.2", "--poll-interval", "0.2", "-v", "1")
DRAIN_JOBS = int(os.environ.get("PGJOBS_ASYNC_JOBS", "2000"))


def job(job_id: int) -> Job:
    return Job.objects.get(pk=job_id)


def running(*ids: int) -> bool:
    return Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING).count() == len(ids)


def finished(*ids: int) -> bool:
    return not Job.objects.filter(pk__in=ids, status__in=["PENDING", "RUNNING"]).exists()


def stop(worker, timeout: float = 30) -> str:
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=timeout) == 0, worker.output()
    return worker.output()


def tally(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(a), int(b)) for a, b, _ in (ln.split() for ln in path.read_text().splitlines())]


def test_two_workers_drain_exactly_once_and_a_kill_9_loses_nothing(
    start_worker, invariants, tmp_path
):
    """2 workers x --async-concurrency 200 drain I/O-bound jobs; one is killed -9 mid-drain:
    its jobs are reaped and run again, every job completes, no (job, attempt) runs twice."""
    path = tmp_path / "tally"
    env = {"PGJOBS_TALLY": str(path)}
    ids = enqueue_many("test.asleep", [{"seconds": 0.05}] * DRAIN_JOBS)
    invariants.track(ids)
    args = (*FAST, "--async-concurrency", "200")
    victim = start_worker(*args, env=env)
    survivor = start_worker(*args, env=env)
    eventually(lambda: len(tally(path)) >= DRAIN_JOBS // 4, timeout=60, message="a quarter ran")
    victim.signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL
    eventually(lambda: finished(*ids), timeout=120, message="drained after the kill")
    stop(survivor)
    runs = tally(path)
    assert not [r for r, n in Counter(runs).items() if n > 1], "a (job, attempt) ran twice"
    assert {j for j, _ in runs} == set(ids)
    statuses = Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {JobStatus.COMPLETED: len(ids)}
    once = set(Job.objects.filter(pk__in=ids, attempts=1).values_list("id", flat=True))
    assert all(n == 1 for j, n in Counter(j for j, _ in runs).items() if j in once)
    invariants.check(drained=True, min_lease=LEASE)


def test_sigterm_lets_coroutines_finish_then_cancels_and_refunds_the_rest(start_worker):
    short = enqueue_many("test.abehave", [{"do": "wait", "seconds": 1.0}] * 5)
    long = enqueue_many("test.abehave", [{"do": "wait", "seconds": 60}] * 5)
    w = start_worker(*FAST, "--shutdown-timeout", "2")
    eventually(lambda: running(*short, *long), timeout=30, message="all ten running")
    began = time.monotonic()
    out = stop(w)
    assert time.monotonic() - began < 8, out
    assert all(job(i).status == JobStatus.COMPLETED for i in short)
    for i in long:
        j = job(i)
        assert (j.status, j.attempts) == (JobStatus.PENDING, 0), (j.status, j.attempts)
        assert j.history[-1]["outcome"] == "released"
    assert "released 5 jobs still running after the shutdown timeout" in out


def test_cancel_request_cancels_the_coroutine_at_its_next_await(start_worker):
    waiting = enqueue("test.abehave", {"do": "wait", "seconds": 60})
    cleanup = enqueue("test.abehave", {"do": "raise_on_cancel"})
    w = start_worker(*FAST)
    eventually(lambda: running(waiting.id, cleanup.id), timeout=30, message="running")
    cancel([waiting.id, cleanup.id])
    eventually(lambda: finished(waiting.id, cleanup.id), timeout=10, message="cancelled")
    for j in (job(waiting.id), job(cleanup.id)):
        assert j.status == JobStatus.CANCELLED, (j.status, j.error)
        assert "cancel requested" in j.error
    # an exception raised while cancelling is kept in the error, the job still CANCELLED
    assert "cleanup failed while cancelling" in job(cleanup.id).error
    stop(w)


def test_timeout_cancels_within_about_100ms_and_an_ignored_cancel_is_abandoned(start_worker):
    late = enqueue("test.atimeout", {})
    stubborn = enqueue("test.atimeout", {"swallow": True, "do": "swallow", "seconds": 4})
    w = start_worker(*FAST)
    eventually(lambda: finished(late.id, stubborn.id), timeout=30, message="timed out")
    j = job(late.id)
    assert j.status == JobStatus.FAILED and "JobTimeout" in j.error, j.error
    assert 300 <= j.duration_ms <= 400, j.duration_ms  # the timeout is 0.3 s
    s = job(stubborn.id)
    assert s.status == JobStatus.FAILED and "ignored its cancel" in s.error, s.error
    after = enqueue("test.abehave", {})  # the worker goes on
    eventually(lambda: finished(after.id), timeout=10, message="next job ran")
    out = stop(w)
    assert "job.cancel_ignored test.atimeout#" in out


def test_progress_item_results_orm_and_bad_returns(start_worker):
    progress = enqueue("test.abehave", {"do": "progress", "seconds": 0.4})
    orm = enqueue("test.abehave", {"do": "orm"})
    boom = enqueue("test.abehave", {"do": "raise"})
    bad = enqueue("test.sync_returns_coroutine", {})
    w = start_worker(*FAST)
    eventually(
        lambda: (job(progress.id).progress or {}).get("done", 0) >= 1,
        timeout=30,
        message="progress written while it runs",
    )
    eventually(lambda: finished(progress.id, orm.id), timeout=30, message="done")
    p = job(progress.id)
    assert p.status == JobStatus.COMPLETED and p.progress["done"] == 3, p.progress
    assert job(orm.id).result == {"runs": 1}
    eventually(lambda: job(boom.id).attempts == 2 and finished(boom.id), timeout=20)
    b = job(boom.id)
    assert b.status == JobStatus.FAILED and "async boom" in b.error  # retried, then failed
    eventually(lambda: finished(bad.id), timeout=20)
    assert "is a sync function that returned an awaitable" in job(bad.id).error
    stop(w)


def test_a_blocking_handler_is_named_by_the_watchdog_and_heartbeats_go_on(start_worker):
    blocker = enqueue("test.abehave", {"do": "block", "seconds": 1.2})
    w = start_worker(*FAST)
    eventually(lambda: finished(blocker.id), timeout=30, message="blocker done")
    assert job(blocker.id).status == JobStatus.COMPLETED  # lease (1 s) renewed meanwhile
    eventually(lambda: "loop_unblocked" in w.output(), timeout=10, message="unblocked said")
    out = stop(w)
    assert "blocked for" in out and f"test.abehave#{blocker.id}" in out, out
    assert "worker.loop_unblocked the event loop was blocked for 1." in out, out


def test_a_coroutine_that_never_awaits_and_a_forgotten_await_get_clear_errors(start_worker):
    """Bad input: a coroutine blocking the loop past its timeout (it cannot be cancelled) is
    recorded timed out while it still runs; an async handler returning a coroutine fails once,
    saying an await is missing. The worker goes on."""
    blocked = enqueue("test.atimeout", {"block": 3.0})
    forgot = enqueue("test.abehave", {"do": "return_awaitable"})
    w = start_worker(*FAST)
    eventually(lambda: finished(blocked.id, forgot.id), timeout=30, message="both ended")
    b = job(blocked.id)
    assert b.status == JobStatus.FAILED and "timeout" in b.error, b.error
    assert b.duration_ms < 3000, b.duration_ms  # recorded before the coroutine returned
    f = job(forgot.id)
    assert f.status == JobStatus.FAILED and f.attempts == 1, (f.status, f.attempts)
    assert "returned an awaitable (coroutine)" in f.error and "missing `await`" in f.error
    after = enqueue("test.abehave", {})
    eventually(lambda: finished(after.id), timeout=20, message="next job ran")
    assert job(after.id).status == JobStatus.COMPLETED
    stop(w)


def _health() -> tuple[int, dict]:
    out = io.StringIO()
    try:
        call_command("pgjobs_health", "--json", "--min-dead-tuples", "2000000000", stdout=out)
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    return code, json.loads(out.getvalue())


def test_pgjobs_health_names_the_lag_of_a_loop_a_handler_blocks(start_worker):
    """time.sleep inside an async def: the heartbeat carries the worst lag since the last one
    (lease 6 s: a beat every 2 s), pgjobs_health lists it and is unhealthy past 1 s."""
    w = start_worker("--lease", "6", "--poll-interval", "0.2", "-v", "1")
    eventually(lambda: _health()[1]["metrics"]["event_loops"], timeout=30, message="loop row")
    code, doc = _health()
    assert code == 0 and doc["metrics"]["event_loops"][0]["loop_lag_seconds"] < 1.0, doc
    blocker = enqueue("test.abehave", {"do": "block", "seconds": 2.5})
    eventually(lambda: _health()[0] == 1, timeout=30, message="pgjobs_health unhealthy")
    code, doc = _health()
    (loop,) = doc["metrics"]["event_loops"]
    assert loop["loop_lag_seconds"] >= 1.0, doc
    assert any(f"event loop of worker {loop['worker_id']} lagged" in p for p in doc["problems"])
    eventually(lambda: finished(blocker.id), timeout=30, message="blocker done")
    eventually(lambda: _health()[0] == 0, timeout=30, message="healthy again after a beat")
    stop(w)


class _Slow(BaseHTTPRequestHandler):
    delay = 0.05

    def do_GET(self) -> None:  # noqa: N802
        time.sleep(self.delay if self.path != "/slow" else 3.0)
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_real_http_client_slow_and_refusing_servers_lead_to_retries(start_worker, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{s.getsockname()[1]}/"
    try:
        path = tmp_path / "tally"
        ok = enqueue_many(  # a generous client timeout: the machine may be loaded
            "test.abehave", [{"do": "http", "url": url + "/", "client_timeout": 15}] * 50
        )
        slow = enqueue("test.abehave", {"do": "http", "url": url + "/slow", "client_timeout": 0.3})
        refusing = enqueue("test.abehave", {"do": "http", "url": refused})
        w = start_worker(*FAST, "--async-concurrency", "50", env={"PGJOBS_TALLY": str(path)})
        eventually(lambda: finished(*ok, slow.id, refusing.id), timeout=90, message="all done")
        assert len(tally(path)) == 50
        assert set(Job.objects.filter(pk__in=ok).values_list("status", flat=True)) == {
            JobStatus.COMPLETED
        }
        for j, error in ((job(slow.id), "ReadTimeout"), (job(refusing.id), "ConnectError")):
            assert (j.status, j.attempts) == (JobStatus.FAILED, 2), (j.status, j.attempts)
            assert error in j.error
        stop(w)
    finally:
        server.shutdown()


def test_async_django_task_runs_on_the_loop_and_async_api_works_in_a_running_loop(start_worker):
    """What an ASGI view does: aenqueue, aget_result, arefresh inside a running event loop; the
    worker awaits the async task on its loop."""
    import asyncio

    from django_pgjobs import registry
    from django_pgjobs.tasks_api import TaskResultStatus, default_task_backend
    from tests.testapp.tasks import async_double

    assert default_task_backend.supports_async_task
    assert registry.get("task:tests.testapp.tasks.async_double").is_async  # the loop runs it

    async def view_enqueue():
        result = await async_double.aenqueue(21)
        fetched = await default_task_backend.aget_result(result.id)
        return result, fetched.status

    result, status = asyncio.run(view_enqueue())
    assert status == TaskResultStatus.READY
    w = start_worker(*FAST)
    eventually(lambda: finished(int(result.id)), timeout=30, message="task ran")

    async def view_refresh():
        await result.arefresh()
        return result.status, result.return_value

    assert asyncio.run(view_refresh()) == (TaskResultStatus.SUCCESSFUL, 42)
    stop(w)
