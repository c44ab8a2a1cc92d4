"""Eight worker processes on 20,000 jobs: each runs exactly once, no deadlock.

About 35 s on a 2-core machine since the one-round-trip hot path: part of the default run.
"""

import pytest

from django_pgjobs import enqueue_many
from tests.conftest import sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)


def test_eight_workers_drain_20000_jobs_exactly_once(start_worker, invariants):
    invariants.track(enqueue_many("test.behave", [{"do": "ok", "i": i} for i in range(20_000)]))
    workers = [start_worker("--burst", "--concurrency", "2", "-v", "0") for _ in range(8)]
    codes = [w.wait(timeout=600) for w in workers]
    assert codes == [0] * 8, [w.output()[-2000:] for w in workers]
    assert sql("SELECT status, count(*) FROM pgjobs_job GROUP BY status") == [("COMPLETED", 20_000)]
    # One run per job, all on attempt 1, shared by all eight workers.
    assert sql(
        "SELECT count(*), count(DISTINCT job_id), max(attempt), count(DISTINCT pid) "
        "FROM testapp_execution"
    ) == [(20_000, 20_000, 1, 8)]
    assert sql_one("SELECT max(attempts) FROM pgjobs_job") == 1
    invariants.check(drained=True)
