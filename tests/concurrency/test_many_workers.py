"""Several real runjobs processes on one queue: every job runs exactly once, no deadlock."""

import threading

import pytest
from django.db import connections

from django_pgjobs import enqueue, enqueue_many, queries
from django_pgjobs.models import Job
from django_pgjobs.queries import Completion
from django_pgjobs.worker.maintenance import reaped_fate
from tests.acceptance.invariants import Invariants
from tests.conftest import deadlocks, eventually, sql, sql_one
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def test_four_workers_drain_5000_jobs_exactly_once(start_worker):
    inv = Invariants.begin().track(
        enqueue_many("test.behave", [{"do": "ok", "i": i} for i in range(5000)])
    )
    before = deadlocks()
    workers = [
        start_worker("--burst", "--concurrency", "2", "--batch-size", "2", "-v", "0")
        for _ in range(4)
    ]
    codes = [w.wait(timeout=240) for w in workers]
    assert codes == [0, 0, 0, 0], [w.output()[-2000:] for w in workers]
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY status") == [("COMPLETED", 5000)]
    # One execution per job, all on attempt 1: nothing ran twice, nothing was lost.
    assert Execution.objects.count() == 5000
    assert sql_one("SELECT count(DISTINCT job_id) FROM testapp_execution") == 5000
    assert sql_one("SELECT max(attempts) FROM pgjobs_job") == 1
    # The work was shared.
    assert sql_one("SELECT count(DISTINCT pid) FROM testapp_execution") == 4
    assert deadlocks() - before == 0
    inv.check(drained=True)


def test_four_prefetching_workers_run_8000_short_jobs_exactly_once(start_worker, tmp_path):
    """The defaults' prefetch: each worker holds up to 200 claimed jobs beyond its 2 threads
    while the jobs run short. Still every job once, on attempt 1, none lost."""
    tally = tmp_path / "tally"
    inv = Invariants.begin().track(enqueue_many("test.tally", [{"i": i} for i in range(8000)]))
    workers = [
        start_worker("--burst", "--concurrency", "2", "-v", "0", env={"PGJOBS_TALLY": str(tally)})
        for _ in range(4)
    ]
    most_held = 0  # the most RUNNING jobs one worker held at once, sampled

    def sampled_until_all_exited() -> bool:
        nonlocal most_held
        held = sql(
            "SELECT count(*) FROM pgjobs_job WHERE status = 'RUNNING' "
            "GROUP BY locked_by ORDER BY 1 DESC LIMIT 1"
        )
        most_held = max([most_held, *(n for (n,) in held)])
        return all(w.proc.poll() is not None for w in workers)

    eventually(sampled_until_all_exited, timeout=240, interval=0.005, message="workers drained")
    assert [w.wait(timeout=60) for w in workers] == [0, 0, 0, 0], [
        w.output()[-2000:] for w in workers
    ]
    runs = [line.split() for line in tally.read_text().splitlines()]
    assert len(runs) == 8000 and len({job_id for job_id, _, _ in runs}) == 8000
    assert {attempt for _, attempt, _ in runs} == {"1"}
    assert len({pid for _, _, pid in runs}) >= 2  # shared
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY status") == [("COMPLETED", 8000)]
    assert most_held > 2, "no worker ever held more jobs than threads: prefetch never ran"
    inv.check(drained=True)


def test_concurrent_claims_never_overlap():
    """Eight threads claim from the same 400 jobs at once; each job is claimed once."""
    enqueue_many("test.noop", [{}] * 400)
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def claimer(n):
        try:
            barrier.wait()
            while True:
                rows = queries.claim(
                    worker_id=f"t{n}", types=["test.noop"], queues=None, limit=7, lease_seconds=30
                )
                if not rows:
                    return
                assert len(rows) <= 7
                with lock:
                    claimed.extend(r.id for r in rows)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(claimed) == 400 and len(set(claimed)) == 400


def test_reaper_and_finalize_race_on_separate_connections():
    """100 rounds: a finalize and a reap hit the same expired lease at the same instant.
    Exactly one wins; a completion is never turned back into PENDING."""
    results = {}
    for i in range(100):
        enqueue("test.noop", {"i": i})
        (row,) = queries.claim(
            worker_id="w", types=["test.noop"], queues=None, limit=1, lease_seconds=30
        )
        sql(
            "UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 ms' WHERE id=%s", [row.id]
        )
        barrier = threading.Barrier(2)

        def do_finalize(row=row, barrier=barrier):
            try:
                barrier.wait()
                done = Completion(id=row.id, token=row.lease_token, attempt=1, status="COMPLETED")
                results["finalize"] = queries.finalize([done]) == {row.id}
            finally:
                connections.close_all()

        def do_reap(barrier=barrier):
            try:
                barrier.wait()
                results["reap"] = bool(queries.reap(reaped_fate))
            finally:
                connections.close_all()

        threads = [threading.Thread(target=do_finalize), threading.Thread(target=do_reap)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results["finalize"] != results["reap"], results
        status = Job.objects.get(pk=row.id).status
        assert status == ("COMPLETED" if results["finalize"] else "PENDING")
        Job.objects.filter(pk=row.id).delete()
