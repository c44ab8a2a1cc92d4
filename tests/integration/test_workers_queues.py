"""Bug 1: a worker's queues (a jsonb column) are a list in stats, pgjobs_stats and the
dashboard, not the column's text shown character by character."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_pgjobs import dashboard, stats
from django_pgjobs.sql import workers

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_workers():
    workers.upsert_worker(
        worker_id="w-all", hostname="h", pid=1, queues=["*"], concurrency=4, jobs_done=0
    )
    workers.upsert_worker(
        worker_id="w-two", hostname="h", pid=2, queues=["mail", "io"], concurrency=2, jobs_done=5
    )


def test_stats_and_the_dashboard_give_the_queues_as_a_list(two_workers):
    by_id = {w["worker_id"]: w["queues"] for w in stats.workers()}
    assert by_id == {"w-all": ["*"], "w-two": ["mail", "io"]}
    assert {w["worker_id"]: w["queues"] for w in dashboard.build()["workers"]} == by_id


def test_pgjobs_stats_json_and_text(two_workers):
    out = StringIO()
    call_command("pgjobs_stats", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert {w["worker_id"]: w["queues"] for w in data["workers"]} == {
        "w-all": ["*"],
        "w-two": ["mail", "io"],
    }
    out = StringIO()
    call_command("pgjobs_stats", stdout=out)
    lines = [ln.split() for ln in out.getvalue().splitlines() if ln.startswith("w-")]
    assert sorted((ln[0], ln[1]) for ln in lines) == [("w-all", "*"), ("w-two", "mail,io")]
