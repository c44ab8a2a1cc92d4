"""The job changelist: columns, derived statuses, filters, search, and cheap counting."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgjobs import admin as jobs_admin
from tests.support.admin import make_job

pytestmark = pytest.mark.django_db
URL = "/admin/django_pgjobs/job/"


def ids_on_page(response) -> set[int]:
    return {
        int(i)
        for i in re.findall(r'name="_selected_action" value="(\d+)"', response.content.decode())
    }


@pytest.fixture
def jobs():
    now = timezone.now()
    return {
        "due": make_job(),
        "scheduled": make_job(run_after=now + timedelta(hours=1)),
        "retrying": make_job(attempts=1, error="RuntimeError: flaky"),
        "running": make_job("RUNNING", queue="mail"),
        "stale": make_job("RUNNING", lease_expires_at=now - timedelta(seconds=5)),
        "done": make_job("COMPLETED", type="test.echo", tenant_id="acme"),
        "failed": make_job("FAILED", trace_id="4bf92f3577b34da6a3ce929d0e0e4736"),
        "old": make_job("COMPLETED", finished_at=now - timedelta(days=3)),
    }


def test_columns_show_derived_status_attempts_error_and_trace(admin_client, jobs):
    html = admin_client.get(URL).content.decode()
    for label in ("scheduled", "retrying", "stale", "running", "failed", "completed"):
        assert f">{label}</span>" in html, label
    assert "3/3" in html  # attempts n/max of the failed job
    assert "card &lt;b&gt;declined&lt;/b&gt; <b>ValueError</b>" in html  # message, then class
    assert "second line" not in html
    assert "1.5 s" in html  # duration
    assert "finished 2.0 s ago" not in html  # finished just now: seconds, not "0 minutes"
    assert re.search(r"due <time[^>]*>in 59 min \d+ s</time>", html)  # precise relative times
    assert re.search(r"started <time[^>]*>\d+ ms ago</time>|started <time[^>]*>now</time>", html)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=due", {"due", "retrying"}),  # retrying and due now
        ("state=scheduled", {"scheduled"}),
        ("state=retrying", {"retrying"}),
        ("state=PENDING", {"due", "scheduled", "retrying"}),
        ("state=RUNNING", {"running", "stale"}),
        ("state=stale", {"stale"}),
        ("state=FAILED", {"failed"}),
        ("queue=mail", {"running"}),
        ("type=test.echo", {"done"}),
        ("tenant=acme", {"done"}),
        ("finished=1h", {"done", "failed"}),
        ("finished=7d", {"done", "failed", "old"}),
        ("has_error=yes", {"retrying", "failed"}),
        ("q=4bf92f3577b34da6a3ce929d0e0e4736", {"failed"}),  # full trace id
        ("q=4bf92f35", {"failed"}),  # its beginning
        ("q=4BF92F35", {"failed"}),  # pasted upper-case
        ("q=test.ec", {"done"}),  # beginning of a type
        ("q=nothing-like-this", set()),
    ],
)
def test_filters_and_search(admin_client, jobs, query, expected):
    response = admin_client.get(f"{URL}?{query}")
    assert response.status_code == 200
    assert ids_on_page(response) == {jobs[k].id for k in expected}


def test_search_by_id(admin_client, jobs):
    assert ids_on_page(admin_client.get(f"{URL}?q={jobs['stale'].id}")) == {jobs["stale"].id}


def test_filter_choices_list_queues_types_and_tenants(admin_client, jobs):
    html = admin_client.get(URL).content.decode()
    assert "?queue=mail" in html and "?type=test.echo" in html and "?tenant=acme" in html


def test_list_defers_json_columns_and_never_counts_the_whole_table(admin_client, jobs):
    with CaptureQueriesContext(connection) as ctx:
        assert admin_client.get(URL).status_code == 200
    job_selects = [
        q["sql"]
        for q in ctx.captured_queries
        if 'FROM "pgjobs_job"' in q["sql"] and "COUNT" not in q["sql"].upper()
    ]
    listing = [s for s in job_selects if '"pgjobs_job"."locked_by"' in s]
    assert listing, job_selects
    for column in ("config", "result", "history"):
        assert f'"pgjobs_job"."{column}"' not in listing[0], column
    counts = [q["sql"] for q in ctx.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT" in c.upper() for c in counts), counts


def test_past_the_exact_limit_the_count_is_the_planners_estimate(admin_client, monkeypatch):
    for _ in range(30):
        make_job("COMPLETED")
    with connection.cursor() as cur:
        cur.execute("ANALYZE pgjobs_job")
    monkeypatch.setattr(jobs_admin, "EXACT_COUNT_UP_TO", 10)
    response = admin_client.get(URL)
    assert response.status_code == 200
    count = response.context["cl"].result_count
    assert count >= 11  # not the capped 10: an estimate of the 30 rows
    assert "Show all" not in response.content.decode() or count <= 200


def test_only_the_id_is_sortable(admin_client, jobs):
    response = admin_client.get(f"{URL}?o=5")  # an unsortable column index is ignored
    assert response.status_code == 200


def test_failed_view_gives_the_error_room_and_keeps_types_apart(admin_client):
    """Issue 30.5: the message first and the short class name (the dotted path and the whole
    line in the title); no status column in a one-state view; long types cut in the middle."""
    error = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in run\n'
        "django_pgjobs.exceptions.PaymentError: Payment provider rejected the charge\n"
    )
    for kind in ("pdf", "csv"):
        make_job("FAILED", type=f"billing.invoices.generate_monthly_invoice_{kind}", error=error)
    html = admin_client.get(f"{URL}?state=FAILED").content.decode()
    assert (
        'title="django_pgjobs.exceptions.PaymentError: Payment provider rejected the charge"'
        in html
    )
    assert ">Payment provider rejected the charge <b>PaymentError</b></span>" in html
    assert "column-status_col" not in html
    assert "column-status_col" in admin_client.get(URL).content.decode()
    for kind in ("pdf", "csv"):
        assert f">billing.…monthly_invoice_{kind}</a>" in html
        assert f'title="billing.invoices.generate_monthly_invoice_{kind}"' in html


def test_delete_keeps_the_lists_filter_after_its_confirmation(admin_client):
    """Issue 30.10: Yes and No of the confirmation lead back to the filtered list."""
    failed, done = make_job("FAILED"), make_job("COMPLETED")
    form = {"action": "delete_finished_jobs", "index": "0", "_selected_action": [failed.id]}
    confirm = admin_client.post(f"{URL}?state=FAILED", form).content.decode()
    assert f'<form method="post" action="{URL}?state=FAILED">' in confirm
    assert f'href="{URL}?state=FAILED" class="button cancel-link"' in confirm
    response = admin_client.post(f"{URL}?state=FAILED", {**form, "post": "yes"}, follow=True)
    assert response.redirect_chain[-1][0].endswith("?state=FAILED")
    assert ids_on_page(response) == set() and "Delete: 1 done" in response.content.decode()
    assert done.id in ids_on_page(admin_client.get(URL))
