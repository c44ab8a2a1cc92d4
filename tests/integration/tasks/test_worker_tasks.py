"""@task functions run by the real worker's executor threads, in-process (a `runjobs`
subprocess: tests/acceptance/test_task_jobs.py). Committed transactions (transaction=True), as in
production."""

import sys
import threading

import pytest

from django_pgjobs.exceptions import JobTimeout
from django_pgjobs.tasks_api import TaskResultStatus, task_finished, task_started
from tests.conftest import eventually, run_worker
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_threads_run_tasks_and_signal_from_the_right_threads():
    threads = []

    def on_started(sender, task_result, **kwargs):
        threads.append(("started", threading.current_thread().name))

    def on_finished(sender, task_result, **kwargs):
        threads.append(("finished", threading.current_thread().name))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        results = [t.add.enqueue(1, 2), t.async_double.enqueue(4), t.flaky.enqueue(1)]
        worker = run_worker()

        def all_done():
            for r in results:
                r.refresh()
            if all(r.is_finished for r in results):
                return True
            run_worker(worker_id=worker.worker_id)  # the retry (backoff 0) may need a round
            return False

        eventually(all_done, timeout=20, message="tasks finished")
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 3
    assert [r.return_value for r in results[:2]] == [3, 8]
    assert results[2].worker_ids == [worker.worker_id] * 2
    assert results[2].return_value == {"attempt": 2, "job_attempts": 2}
    assert {name for event, name in threads if event == "started"} <= {
        "pgjobs-aio",  # async_double: on the worker's event loop (worker/aio.py)
        "pgjobs-exec-0",
        "pgjobs-exec-1",
    }
    assert {name for event, name in threads if event == "finished"} == {"MainThread"}
    assert len(threads) == 8  # 4 attempts, each started and finished


def test_a_task_over_its_timeout_fails_with_job_timeout():
    seen = []

    def on_finished(sender, task_result, **kwargs):
        seen.append((task_result.status, sys.exc_info()[1]))

    task_finished.connect(on_finished)
    try:
        result = t.sleepy.enqueue(1.5)
        run_worker(lease_seconds=0.6)  # timeouts are checked with the heartbeat (lease / 3)
    finally:
        task_finished.disconnect(on_finished)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "django_pgjobs.exceptions.JobTimeout"
    [(status, exc)] = seen  # the thread was abandoned: the exception is the recorded timeout
    assert status == TaskResultStatus.FAILED and isinstance(exc, JobTimeout)
    assert "longer than its timeout of 0.3s" in str(exc)


def test_timestamps_are_ordered_with_a_real_worker():
    results = [t.add.enqueue(1, 2), t.boom.enqueue("x")]
    run_worker()
    for r in results:
        r.refresh()
        assert r.is_finished
        assert r.enqueued_at <= r.started_at == r.last_attempted_at <= r.finished_at
