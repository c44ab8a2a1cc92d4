"""`runjobs` prints one line per finished job for people who watch a terminal (issue 30.12):
its outcome, type, id, attempt and duration; at the default verbosity (1) and at 2, which adds
a `job.started` line; `-v 0` keeps only warnings and errors."""

import re

import pytest
from django.db import connection

from django_pgjobs import enqueue
from tests.support.commands import manage

pytestmark = pytest.mark.django_db(transaction=True)

OUTCOMES = {
    "ok": "job.completed",
    "items": "job.completed_with_errors",
    "fail": "job.failed",
    "retry": "job.retry_scheduled",
}


def finished_lines(output: str, job_id: int) -> list[str]:
    return re.findall(
        rf"^.* (job\.\w+) test\.behave#{job_id} .*duration_ms=\d+.*$", output, re.MULTILINE
    )


@pytest.mark.parametrize("verbosity", ["1", "2"])
def test_one_line_per_finished_job(verbosity):
    jobs = {do: enqueue("test.behave", {"do": do, "seconds": 3600}) for do in OUTCOMES}
    done = manage("runjobs", "--burst", "-v", verbosity, db_name=connection.settings_dict["NAME"])
    assert done.returncode == 0, done.stderr[-3000:]
    for do, job in jobs.items():
        lines = [
            ln
            for ln in done.stderr.splitlines()
            if f"test.behave#{job.id} " in ln and "duration_ms=" in ln
        ]
        assert finished_lines(done.stderr, job.id) == [OUTCOMES[do]], done.stderr[-3000:]
        assert len(lines) == 1 and "attempt=1/3" in lines[0], lines
    started = re.findall(r" job\.started test\.behave#", done.stderr)
    assert len(started) == (4 if verbosity == "2" else 0), done.stderr[-3000:]


def test_verbosity_0_prints_no_success_line():
    ok = enqueue("test.behave", {"do": "ok"})
    failed = enqueue("test.behave", {"do": "fail"})
    done = manage("runjobs", "--burst", "-v", "0", db_name=connection.settings_dict["NAME"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert finished_lines(done.stderr, ok.id) == []
    assert finished_lines(done.stderr, failed.id) == ["job.failed"], done.stderr[-3000:]
