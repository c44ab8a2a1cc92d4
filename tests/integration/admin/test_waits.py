"""Issue 30.3: a pending job says why it waits (queue paused, queue at its limit, waiting for a
retry) in the job list and on its page, and Run now's message names it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgjobs import waits
from django_pgjobs.models import Queue
from tests.integration.admin.test_actions import act, message
from tests.support.admin import make_job

pytestmark = pytest.mark.django_db
URL = "/admin/django_pgjobs/job/"


def overdue(**fields):
    return make_job(run_after=timezone.now() - timedelta(minutes=5), **fields)


def test_each_reason_in_the_list_and_on_the_job_page(admin_client):
    Queue.objects.create(name="held", paused=True)
    Queue.objects.create(name="capped", concurrency_limit=1)
    paused, capped, free = overdue(queue="held"), overdue(queue="capped"), overdue()
    make_job("RUNNING", queue="capped")
    retrying = make_job(attempts=1, run_after=timezone.now() + timedelta(minutes=3))
    html = admin_client.get(URL).content.decode()
    assert html.count('class="pgjobs-wait">queue paused<') == 1
    assert html.count('class="pgjobs-wait">queue at its limit of 1<') == 1
    assert 'class="pgjobs-wait">waiting for retry 1 at ' in html
    for job, text in (
        (paused, "queue paused"),
        (capped, "queue at its limit of 1"),
        (retrying, "waiting for retry 1 at "),
    ):
        page = admin_client.get(f"{URL}{job.id}/change/").content.decode()
        assert f"<tr><th>waiting</th><td>{text}" in page, job.queue
    assert "<th>waiting</th>" not in admin_client.get(f"{URL}{free.id}/change/").content.decode()


def test_a_queue_below_its_limit_holds_nothing():
    Queue.objects.create(name="capped", concurrency_limit=2)
    job = overdue(queue="capped")
    make_job("RUNNING", queue="capped")
    assert waits.reason(job, waits.queue_states(["capped"])["capped"]) == ""


def test_the_list_asks_once_for_all_queues_on_the_page(admin_client):
    for i in range(6):
        Queue.objects.create(name=f"q{i}", paused=i % 2 == 0, concurrency_limit=1)
        overdue(queue=f"q{i}")
    with CaptureQueriesContext(connection) as ctx:
        assert admin_client.get(URL).status_code == 200
    asked = [q["sql"] for q in ctx.captured_queries if "q.concurrency_limit" in q["sql"]]
    assert len(asked) == 1, asked


def test_run_now_names_what_holds_a_due_job(admin_client):
    Queue.objects.create(name="held", paused=True)
    Queue.objects.create(name="capped", concurrency_limit=0)
    text = message(
        act(admin_client, "run_jobs_now", overdue(queue="held"), overdue(queue="capped"))
    )
    assert "2 skipped" in text, text
    assert (
        "the due ones wait because: queue at its limit of 0 (capped); queue paused (held)" in text
    ), text


def test_run_now_of_a_retry_in_a_paused_queue_says_it_is_still_held(admin_client):
    Queue.objects.create(name="held", paused=True)
    job = make_job(queue="held", attempts=1, run_after=timezone.now() + timedelta(minutes=3))
    text = message(act(admin_client, "run_jobs_now", job))
    assert "Run now: 1 done (due now, but still held: queue paused (held))" in text, text
