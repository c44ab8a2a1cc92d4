"""Issue 21's pages, read through Django's test client: the job list's tabs and times, the job
page's order, timeline and formats, the dashboard's panels, the queues and schedules pages.
(The browser tests check what needs a layout: overflow, font sizes, contrast.)"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_pgjobs import rollup
from django_pgjobs.sql import queues
from tests.conftest import sql
from tests.support.admin import TRACEBACK, make_job
from tests.support.schedules import clean_decorators, entry, schedules, utc  # noqa: F401

pytestmark = pytest.mark.django_db
JOBS = "/admin/django_pgjobs/job/"
DASHBOARD = "/admin/django_pgjobs/dashboard/"


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# --- job list ----------------------------------------------------------------------------------


def test_state_tabs_count_each_state_and_keep_the_other_filters(admin_client):
    for _ in range(3):
        make_job("FAILED")
    make_job("RUNNING", queue="mail")
    html = page(admin_client, JOBS + "?queue=mail")
    tabs = re.search(r'<ul class="pgjobs-tabs".*?</ul>', html, re.S).group(0)
    assert re.search(
        r'href="\?queue=mail&amp;state=FAILED"[^>]*>Failed<span class="count">3<', tabs
    ), tabs
    assert re.search(r">Running<span class=\"count\">1<", tabs)


def test_running_job_shows_progress_bar_with_eta_in_the_list(admin_client):
    now = timezone.now()
    make_job(
        "RUNNING",
        started_at=now - timedelta(seconds=30),
        progress={"done": 25, "total": 100, "note": "rows", "at": now.isoformat()},
    )
    html = page(admin_client, JOBS)
    assert 'role="progressbar" aria-valuenow="25"' in html
    assert "25% · ETA 1 min 30 s" in html


# --- job page ----------------------------------------------------------------------------------


def retried_then_failed():
    t0 = timezone.now() - timedelta(minutes=10)
    return make_job(
        "FAILED",
        created_at=t0,
        run_after=t0 + timedelta(seconds=75),
        started_at=t0 + timedelta(seconds=80),
        finished_at=t0 + timedelta(seconds=81),
        duration_ms=1000,
        result={"errors": [{"item": 7, "error": "bad <row>", "line": 3}]},
        history=[
            {
                "attempt": 1,
                "worker": "w1",
                "started_at": (t0 + timedelta(seconds=1)).isoformat(),
                "duration_ms": 500,
                "error": "RuntimeError: flaky",
                "outcome": "retry",
            },
            {
                "attempt": 2,
                "worker": "w2",
                "started_at": (t0 + timedelta(seconds=80)).isoformat(),
                "duration_ms": 1000,
                "error": TRACEBACK,
                "outcome": "attempts_exhausted",
            },
        ],
    )


def test_job_page_puts_the_error_first_and_tells_the_timeline_once_in_order(admin_client):
    job = retried_then_failed()
    html = page(admin_client, f"{JOBS}{job.id}/change/")
    heads = re.findall(r"<h2[^>]*>([^<]+)</h2>", html)
    assert heads.index("Error") < heads.index("Timeline") < heads.index("Config"), heads
    timeline = text(re.search(r'<table class="pgjobs-timeline">.*?</table>', html, re.S)[0])
    order = [
        "enqueued",
        "attempt 1 started on w1",
        "attempt 1 ended after 500 ms: failed; retry scheduled — RuntimeError: flaky; "
        "next attempt started 1 min 18 s later",
        "attempt 2 started on w2",
        "attempt 2 ended after 1.0 s: failed, no attempts left — ValueError",
    ]
    positions = [timeline.find(e) for e in order]
    assert -1 not in positions, (positions, timeline)
    assert positions == sorted(positions), timeline
    assert "finished" not in timeline and timeline.count("attempt 2 started") == 1
    assert "PENDING" not in timeline and "attempts_exhausted" not in timeline


def test_item_errors_are_a_table_and_dates_have_one_format(admin_client):
    job = retried_then_failed()
    html = page(admin_client, f"{JOBS}{job.id}/change/")
    items = re.search(r'<table class="pgjobs-history pgjobs-items">.*?</table>', html, re.S)[0]
    assert "<th>item</th><th>error</th><th>line</th>" in items
    assert "<td>7</td><td>bad &lt;row&gt;</td><td>3</td>" in items
    local = timezone.localtime(job.created_at)
    assert re.search(
        rf'<time datetime="{re.escape(job.created_at.isoformat())}" title="[^"]+">'
        rf"{local:%b}\.? {local.day}, {local.year}, {local:%H:%M:%S}</time>",
        html,
    )


def test_running_job_page_shows_elapsed_time_and_progress(admin_client):
    now = timezone.now()
    job = make_job(
        "RUNNING",
        started_at=now - timedelta(minutes=2, seconds=5),
        progress={"done": 3, "total": None, "note": None, "at": now.isoformat()},
    )
    html = text(page(admin_client, f"{JOBS}{job.id}/change/"))
    assert re.search(r"elapsed 2 min [5-9] s", html), html
    assert "3 done" in html and re.search(r"running for 2 min \d+ s", html)


# --- dashboard ---------------------------------------------------------------------------------


def test_dashboard_window_applies_to_every_panel(admin_client):
    rec = rollup.Recorder()  # the type panel reads the rollup (estimated percentiles)
    rec.record(
        "default",
        "test.echo",
        "completed",
        120,
        at=(timezone.now() - timedelta(hours=2)).timestamp(),
    )
    rec.flush()
    one = admin_client.get(DASHBOARD + "?hours=1").context
    three = admin_client.get(DASHBOARD + "?hours=3").context
    assert [t["type"] for t in one["data"]["types"]] == []
    assert [t["type"] for t in three["data"]["types"]] == ["test.echo"]
    html = page(admin_client, DASHBOARD + "?hours=1")
    assert "Job types, last 1 h" in html and "Failures by type, last 1 h" in html
    assert "last 24 h" not in html


def test_dashboard_shows_paused_and_limited_queues_held_back_jobs_and_wait_times(admin_client):
    queues.set_queue_paused("mail", True)
    queues.set_queue_limit("reports", 1)
    due = timezone.now() - timedelta(hours=1)
    for _ in range(2):
        make_job(queue="mail", run_after=due)
    for _ in range(3):
        make_job(queue="reports", run_after=due)
    make_job("RUNNING", queue="reports")
    now = timezone.now()
    for wait in (1, 2, 3, 4, 40):
        make_job(
            "COMPLETED",
            queue="reports",
            run_after=now - timedelta(seconds=60 + wait),
            started_at=now - timedelta(seconds=60),
            finished_at=now,
        )
    data = admin_client.get(DASHBOARD).context["data"]
    by = {q["queue"]: q for q in data["queues"]}
    assert (by["mail"]["paused"], by["mail"]["held_back"], by["mail"]["held_because"]) == (
        True,
        2,
        "paused",
    )
    assert (by["reports"]["limit"], by["reports"]["held_back"]) == (1, 3)
    assert by["reports"]["wait_p50_s"] == pytest.approx(3, abs=0.6)
    assert by["reports"]["wait_p95_s"] > 20
    html = page(admin_client, DASHBOARD)
    assert ">paused</span>" in html and "limit 1" in html and "3 (limit)" in html


def test_dashboard_names_jobs_of_unknown_types(admin_client):
    make_job(type="nobody.handles.this")
    make_job(type="nobody.handles.this")
    html = page(admin_client, DASHBOARD)
    assert 'id="pgjobs-unknown"' in html and "nobody.handles.this" in html
    assert admin_client.get(DASHBOARD).context["data"]["unknown_types"] == [
        {"type": "nobody.handles.this", "pending": 2, "capped": False}
    ]


def test_dashboard_running_jobs_have_progress_and_workers_list_their_queues(admin_client):
    now = timezone.now()
    make_job(
        "RUNNING",
        started_at=now - timedelta(seconds=10),
        progress={"done": 1, "total": 4, "note": None, "at": now.isoformat()},
    )
    sql(
        "INSERT INTO pgjobs_worker (worker_id, hostname, pid, queues, concurrency) "
        "VALUES ('w1', 'host', 1, '[\"*\", \"mail\"]', 4)"
    )
    html = page(admin_client, DASHBOARD)
    running = re.search(
        r'<table class="pgjobs-table pgjobs-stack" id="pgjobs-running">.*?</table>', html, re.S
    )[0]
    assert 'aria-valuenow="25"' in running and "ETA" in running
    workers = re.search(r'id="pgjobs-workers">.*?</table>', html, re.S)[0]
    assert '<td data-label="queues">*, mail</td>' in workers
    running_json = admin_client.get(DASHBOARD + "json/").json()["running"]
    assert running_json[0]["progress"]["total"] == 4


def test_dashboard_refreshes_itself_without_a_cdn_and_has_admin_breadcrumbs(admin_client):
    import django

    html = page(admin_client, DASHBOARD + "?refresh=5")
    assert re.search(r'<script src="[^"]*django_pgjobs/dashboard.js" defer>', html)
    assert (
        'data-refresh="5"' in html
        and "https://" not in re.sub(r'href="https://[^"]*"', "", html).split("<body")[1]
    )
    if django.VERSION >= (6, 0):
        assert '<ol class="breadcrumbs">' in html
    assert 'data-refresh="0"' in page(admin_client, DASHBOARD + "?refresh=0")


# --- queues and schedules ----------------------------------------------------------------------


def test_queues_page_lists_every_queue_with_jobs(admin_client):
    queues.set_queue_limit("reports", 2)
    make_job(queue="mail", run_after=timezone.now() - timedelta(hours=1))
    make_job("RUNNING", queue="mail")
    html = page(admin_client, reverse("admin:django_pgjobs_queue_changelist"))
    overview = re.search(r'id="pgjobs-queue-overview".*?</table>', html, re.S)[0]
    row = re.search(r'<tr>\s*<td data-label="queue"><a [^>]*>mail</a>.*?</tr>', overview, re.S)[0]
    assert re.findall(r'<td data-label="[^"]+" class="num">(\w+)</td>', row) == [
        "1",
        "0",
        "0",
        "1",
        "none",
    ]
    assert "?name=mail" in row and "add controls" in row
    assert "?name=reports" not in overview and ">edit<" in overview
    tools = re.search(r'<ul class="object-tools">.*?</ul>', html, re.S)[0]
    assert "addlink" not in tools  # no page-wide "Add queue"
    add = page(admin_client, reverse("admin:django_pgjobs_queue_add") + "?name=mail")
    assert re.search(r'name="name" value="mail"', add)


def test_schedule_page_is_read_only_without_save_buttons(admin_client, schedules):  # noqa: F811
    from django_pgjobs.models import Schedule
    from django_pgjobs.scheduler import enqueue_due

    schedules(nightly=entry(cron="0 3 * * *", timezone="Europe/Paris"))
    enqueue_due(now=utc(2030, 1, 7, 12, 0))
    obj = Schedule.objects.get(name="nightly")
    html = page(admin_client, reverse("admin:django_pgjobs_schedule_change", args=[obj.pk]))
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert "<time datetime=" in html
    listing = page(admin_client, reverse("admin:django_pgjobs_schedule_changelist"))
    assert "Jan. 8, 2030, 03:00 CET</time>" in listing  # 02:00 UTC, in the schedule's zone
    assert re.search(r'<span class="pgjobs-sub">in \d+ (y|d)', listing)
    assert (
        'title="0 3 * * * (Europe/Paris, catch up: latest)"><code class="pgjobs-cron">'
        '0 3 * * *</code><span class="pgjobs-sub">Europe/Paris</span>' in listing
    )
    assert "icon-no.svg" not in listing and "icon-yes.svg" in listing  # run now: "–"


def test_history_page_writes_times_as_every_other_page(admin_client):
    """Issue 30.10: Django's History page has its own DATETIME_FORMAT; ours says
    'Dec. 2, 2026, 17:03:04' like the job page."""
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.auth.models import User
    from django.contrib.contenttypes.models import ContentType

    from django_pgjobs.admin_format import when
    from django_pgjobs.models import Job

    job = make_job("FAILED")
    entry = LogEntry.objects.create(
        user=User.objects.get(username="admin"),
        content_type=ContentType.objects.get_for_model(Job),
        object_id=str(job.pk),
        object_repr=str(job),
        action_flag=CHANGE,
        change_message="Retried",
    )
    html = page(admin_client, f"/admin/django_pgjobs/job/{job.pk}/history/")
    assert str(when(entry.action_time)) in html
    assert "p.m." not in html and "a.m." not in html


def test_a_type_with_only_retries_shows_no_duration_and_no_bar(admin_client):
    """Issue 30.10: a type that only retried in the window has no run to time: '–', and the
    duration chart draws no bar for it."""
    rec = rollup.Recorder()
    now = timezone.now().timestamp()
    rec.record("default", "test.echo", "completed", 120, at=now - 60)
    rec.record("default", "only.retried", "retried", 0, at=now - 60)
    rec.flush()
    html = page(admin_client, DASHBOARD)
    types = re.search(r'id="pgjobs-types">.*?</table>', html, re.S)[0]
    row = re.search(r"only\.<wbr>retried</a></td>(.*?)</tr>", types, re.S)[1]
    assert re.findall(r'<td class="num">([^<]*)</td>', row)[:3] == ["–", "–", "–"]
    chart = re.search(r'id="pgjobs-chart-durations">.*?</figure>', html, re.S)[0]
    assert "only.retried" not in chart and "test.echo" in chart


def test_attempts_of_a_retried_then_completed_job_are_separated_and_complete(admin_client):
    """Issue 30.10: a row 'manual retry by … at …' between the runs, and the attempt that
    succeeded (not in the history) last; an instant run took '< 1 ms', not '0 ms'."""
    now = timezone.now()
    job = make_job(
        "COMPLETED",
        attempts=1,
        started_at=now - timedelta(seconds=3),
        duration_ms=0,
        locked_by="vm:4402:e540ea7c",
        history=[
            {
                "attempt": 1,
                "worker": "w1",
                "outcome": "retry",
                "duration_ms": 20,
                "started_at": (now - timedelta(minutes=9)).isoformat(),
            },
            {
                "attempt": 2,
                "worker": "w1",
                "outcome": "attempts_exhausted",
                "duration_ms": 25,
                "started_at": (now - timedelta(minutes=8)).isoformat(),
            },
            {
                "outcome": "manual_retry",
                "previous_status": "FAILED",
                "attempt": 2,
                "by": "admin:ops",
                "at": (now - timedelta(minutes=1)).isoformat(),
            },
        ],
    )
    html = page(admin_client, reverse("admin:django_pgjobs_job_change", args=[job.pk]))
    table = re.search(r'<table class="pgjobs-history">.*?</table>', html, re.S)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]
    assert [re.sub(r"<[^>]+>", "|", r).split("|")[1] for r in rows][:2] == ["1", "2"]
    assert "manual retry by admin:ops at " in rows[2]
    assert rows[3].startswith("<td>1</td><td>completed</td>")
    assert "vm:4402:e540ea7c" in rows[3] and "&lt; 1 ms" in rows[3]
