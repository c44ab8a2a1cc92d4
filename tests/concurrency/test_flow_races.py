"""Unique windows and debounce under contention: 16 threads (and 2 producer processes) enqueue
one key at once, with and without a worker draining it (docs/flow-control.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from datetime import datetime, timedelta

import pytest
from django.db import connection, connections

from django_pgjobs import enqueue
from django_pgjobs.models import Job
from django_pgjobs.retention import prune_once
from tests.concurrency import flow_producer
from tests.conftest import ROOT, eventually, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 16
PROCESSES = 2


def in_threads(work, n: int = THREADS) -> list:
    """``work(i)`` in ``n`` threads released together; their results, in thread order."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    return results


# --- unique window ---------------------------------------------------------------------------------


def race_window(key: str) -> list[tuple[int, bool]]:
    from django_pgjobs import enqueue

    def work(i: int) -> tuple[int, bool]:
        job = enqueue("test.echo", {"i": i}, unique_key=key, unique_for=timedelta(hours=1))
        return job.id, job.deduplicated

    return in_threads(work)


def test_a_window_holds_against_concurrent_enqueuers_after_finish_and_after_pruning():
    first = race_window("report:42")
    assert len({job_id for job_id, _ in first}) == 1
    assert sum(not dedup for _, dedup in first) == 1
    [job_id] = {job_id for job_id, _ in first}
    sql(
        "UPDATE pgjobs_job SET status = 'COMPLETED', finished_at = now() - interval '8 days' "
        "WHERE id = %s",
        [job_id],
    )
    assert race_window("report:42") == [(job_id, True)] * THREADS  # finished: still refused
    assert prune_once()["COMPLETED"] == 1
    assert race_window("report:42") == [(job_id, True)] * THREADS  # pruned: still refused
    assert Job.objects.filter(unique_key="report:42").count() == 0
    sql("UPDATE pgjobs_unique SET until = now() WHERE key = 'report:42'")
    reopened = race_window("report:42")
    assert sum(not dedup for _, dedup in reopened) == 1  # passed: exactly one new job
    assert len({i for i, _ in reopened}) == 1 and reopened[0][0] != job_id


# --- debounce --------------------------------------------------------------------------------------

PER_THREAD = 50
PER_PROCESS = 100
TOTAL = THREADS * PER_THREAD + PROCESSES * PER_PROCESS  # 1,000


def produce_everywhere(key: str, debounce: float) -> list[list]:
    """TOTAL debounced enqueues of ``key`` from THREADS threads and PROCESSES processes."""
    env = {
        **os.environ,
        "PGJOBS_TEST_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONPATH": str(ROOT),
    }
    procs = [
        subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "tests.concurrency.flow_producer",
                f"p{i}",
                str(PER_PROCESS),
                str(debounce),
                key,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    by_thread = in_threads(lambda i: flow_producer.produce(f"t{i}", PER_THREAD, debounce, key))
    records = [r for rs in by_thread for r in rs]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        records.extend(json.loads(out))
    assert len(records) == TOTAL
    return records


def writers_by_job(records: list[list]) -> dict[int, list[list]]:
    """Each job's enqueues, in the order they wrote it (the row lock orders them, and each
    record's time is read while the lock is held)."""
    found: dict[int, list[list]] = defaultdict(list)
    for r in records:
        found[r[2]].append(r)
    for rs in found.values():
        rs.sort(key=lambda r: datetime.fromisoformat(r[4]))
    return found


def test_without_workers_a_thousand_enqueues_make_one_job_with_the_last_config():
    records = produce_everywhere("doc:7", debounce=3600)
    jobs = writers_by_job(records)
    assert len(jobs) == 1, "every enqueue merged into one job"
    [(job_id, writers)] = jobs.items()
    assert sum(r[3] for r in records) == 1  # one inserted it
    last = writers[-1]
    assert Job.objects.get(pk=job_id).config == {"w": last[0], "n": last[1]}


def test_while_draining_every_config_reaches_a_run_started_after_it(start_worker):
    worker = start_worker("--poll-interval", "0.05", "--concurrency", "4", "--no-scheduler")
    # the producers must write while the worker claims: wait until it serves
    probe = enqueue("test.noop", {})
    eventually(lambda: Job.objects.get(pk=probe.pk).status == "COMPLETED", timeout=60, message="up")
    pending_seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        try:
            while not stop.is_set():
                pending_seen.append(
                    sql_one(
                        "SELECT count(*) FROM pgjobs_job "
                        "WHERE debounce_key = 'doc:9' AND status = 'PENDING'"
                    )
                )
        finally:
            connections.close_all()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        records = produce_everywhere("doc:9", debounce=0.02)
    finally:
        stop.set()
        watcher.join(30)
    eventually(
        lambda: (
            not Job.objects.filter(debounce_key="doc:9", status__in=["PENDING", "RUNNING"]).exists()
        ),
        timeout=60,
        message="the key's jobs drained",
    )
    assert max(pending_seen) <= 1, "at most one PENDING job per key at any time"
    runs = {j.id: j for j in Job.objects.filter(debounce_key="doc:9")}
    assert all(j.status == "COMPLETED" for j in runs.values()), worker.output()[-2000:]
    for job_id, writers in writers_by_job(records).items():
        job, last = runs[job_id], writers[-1]
        assert job.result == {"echo": {"w": last[0], "n": last[1]}}, "the last writer's config ran"
        assert job.started_at > datetime.fromisoformat(last[4]), "the run started after it"
    assert len(runs) > 1  # the worker drained while producers wrote
