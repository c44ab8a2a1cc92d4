"""job.progress(): coalesced writes by a real runjobs, the last value with the outcome, no
write without the lease, clear errors for bad values, and the Tasks result's ``progress``."""

import json
import math
import time
from datetime import timedelta

import pytest
from django.utils.dateparse import parse_datetime

from django_pgjobs import InvalidProgress, JobStatus, enqueue
from django_pgjobs.progress import MAX_NOTE_CHARS
from tests.conftest import run_worker, sql, sql_one
from tests.testapp.contexts import job_context

WORKER = ("--burst", "--concurrency", "2", "-v", "1")

# Every change of a job's progress, with its time: counts the writes of a real worker.
_LOG = """
CREATE TABLE progress_log (job_id bigint, progress jsonb, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION progress_logged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO progress_log (job_id, progress) VALUES (NEW.id, NEW.progress); RETURN NEW; END $$;
CREATE TRIGGER progress_logged AFTER UPDATE OF progress ON pgjobs_job FOR EACH ROW
WHEN (NEW.progress IS DISTINCT FROM OLD.progress) EXECUTE FUNCTION progress_logged();
"""


@pytest.fixture
def progress_log(transactional_db):
    sql(_LOG)
    yield
    sql(
        "DROP TRIGGER progress_logged ON pgjobs_job; DROP FUNCTION progress_logged() CASCADE; "
        "DROP TABLE progress_log"
    )


def test_many_quick_reports_make_few_writes_and_the_last_one_is_stored(start_worker, progress_log):
    job = enqueue("test.progress", {"n": 600, "pause": 0.005})
    started = time.monotonic()
    w = start_worker(*WORKER)
    assert w.wait(timeout=60) == 0, w.output()[-3000:]
    elapsed = time.monotonic() - started
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED, job.error
    assert {k: job.progress[k] for k in ("done", "total", "note")} == {
        "done": 600,
        "total": 600,
        "note": "item 600",
    }
    at = parse_datetime(job.progress["at"])  # PostgreSQL trims zeros: Python 3.10 cannot read it
    assert job.started_at <= at <= job.finished_at + timedelta(seconds=1)
    writes = sql("SELECT progress FROM progress_log WHERE job_id = %s ORDER BY at", [job.id])
    # 600 reports over about 3 s: about one write a second, and the final one with the outcome
    assert 2 <= len(writes) <= math.ceil(elapsed) + 2, (len(writes), elapsed)
    done = [json.loads(p)["done"] for (p,) in writes]  # a cursor gives jsonb as text
    assert done == sorted(done) and done[-1] == 600 and done[0] < 600, done


def test_no_progress_is_written_once_the_lease_is_lost(start_worker, progress_log):
    job = enqueue("test.progress", {"n": 300, "pause": 0.005, "steal": True})
    w = start_worker(*WORKER)
    assert w.wait(timeout=60) == 0, w.output()[-3000:]
    assert "job.lease_lost" in w.output()
    assert sql_one("SELECT count(*) FROM progress_log WHERE job_id = %s", [job.id]) == 0
    job.refresh_from_db()
    assert (job.status, job.progress) == (JobStatus.RUNNING, None)


def test_a_new_attempt_starts_without_the_previous_progress(progress_log):
    job = enqueue("test.progress", {"n": 3, "pause": 0})
    sql("UPDATE pgjobs_job SET progress = '{\"done\": 7}' WHERE id = %s", [job.id])
    from django_pgjobs import queries

    rows = queries.claim(
        worker_id="w", types=["test.progress"], queues=None, limit=1, lease_seconds=30
    )
    assert [r.id for r in rows] == [job.id]
    assert sql_one("SELECT progress FROM pgjobs_job WHERE id = %s", [job.id]) is None


def _context():
    return job_context(queue="q", max_attempts=1, created_at=None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1,), "finite number >= 0"),
        ((math.nan,), "finite number >= 0"),
        ((1, math.inf), "finite number >= 0"),
        ((5, 4), "must not exceed total"),
        (("3",), "takes a number"),
        ((True,), "takes a number"),
        ((None,), "takes a number"),
        ((1, 2, 3), "takes a string"),
        ((1, 2, "x" * (MAX_NOTE_CHARS + 1)), f"at most {MAX_NOTE_CHARS} characters"),
    ],
)
def test_a_bad_report_raises_a_clear_error_and_keeps_the_last_good_one(args, message):
    job = _context()
    job.progress(2, 10, "fine")
    with pytest.raises(InvalidProgress, match=message) as caught:
        job.progress(*args)
    assert isinstance(caught.value, ValueError)
    record = job.progress_record()
    assert (record["done"], record["total"], record["note"]) == (2, 10, "fine")


def test_good_reports():
    job = _context()
    job.progress(0, 0)
    job.progress(0.5)
    job.progress(3, 3, "a\x00b")
    record = job.progress_record()
    assert (record["done"], record["total"], record["note"]) == (3, 3, "a\\x00b")


@pytest.mark.django_db(transaction=True)
def test_a_task_reports_progress_through_its_context_and_its_result_shows_it():
    from tests.testapp.tasks import count_up

    result = count_up.enqueue(5)
    assert result.progress is None
    run_worker()
    result.refresh()
    assert result.status == "SUCCESSFUL"
    assert {k: result.progress[k] for k in ("done", "total", "note")} == {
        "done": 5,
        "total": 5,
        "note": "counted",
    }
    assert count_up.get_result(result.id).progress["done"] == 5


@pytest.mark.django_db
def test_run_jobs_in_a_test_transaction_stores_the_last_progress():
    from django_pgjobs.testing import run_jobs

    job = enqueue("test.progress", {"n": 4, "pause": 0})
    [ran] = run_jobs()
    assert ran.id == job.id and ran.status == JobStatus.COMPLETED
    assert (ran.progress["done"], ran.progress["total"], ran.progress["note"]) == (4, 4, "item 4")
