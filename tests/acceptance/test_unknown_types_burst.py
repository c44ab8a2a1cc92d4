"""A job whose type no worker registers waits forever (issue 26.3): a burst worker says so,
after its first claim pass and at its end, naming the types, their counts and how to
register them."""

import pytest
from django.db import connection

from tests.conftest import sql
from tests.support.commands import manage

pytestmark = pytest.mark.django_db(transaction=True)

UNIMPORTED = "task:tests.testapp.not_autodiscovered.send_report"  # a @task nobody imported


def test_burst_worker_names_the_unknown_types_it_leaves_pending():
    for job_type in (UNIMPORTED, UNIMPORTED, "gone.handler"):
        sql("INSERT INTO pgjobs_job (type, queue, config) VALUES (%s, 'default', '{}')", [job_type])
    sql("INSERT INTO pgjobs_job (type, queue, config) VALUES ('test.noop', 'default', '{}')")
    done = manage("runjobs", "--burst", "-v", "1", db_name=connection.settings_dict["NAME"])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    first = [ln for ln in lines if "job.unknown_type" in ln]
    assert any(f"{UNIMPORTED}: 2 due jobs" in ln for ln in first), done.stderr[-3000:]
    assert any("gone.handler: 1 due jobs" in ln for ln in first), done.stderr[-3000:]
    last = [ln for ln in lines if "left pending" in ln]
    assert len(last) == 1, done.stderr[-3000:]
    assert f"{UNIMPORTED} (2), gone.handler (1)" in last[0]
    assert "AUTODISCOVER_MODULES" in last[0] and "docs/tasks.md" in last[0]
    assert sql("SELECT type, status FROM pgjobs_job WHERE type = 'test.noop'") == [
        ("test.noop", "COMPLETED")
    ]
