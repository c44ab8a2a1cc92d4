"""A real headless Chromium (Debian's package, driven by Playwright's Python package): log in,
see the dashboard's charts render, filter the changelist, retry a failed job, see it complete
after a worker run. Screenshots go to test-artifacts/screenshots/.

Under CI=true a missing browser or Playwright is a failure, never a skip.
"""

from __future__ import annotations

from datetime import datetime, timezone

from django_pgjobs import rollup
from django_pgjobs.models import Job
from django_pgjobs.sql import rollups
from tests.admin.helpers import make_job
from tests.browser.conftest import SHOTS
from tests.observability.helpers import run_worker

UTC = timezone.utc  # datetime.UTC is Python >= 3.11


def seed_activity() -> Job:
    rec = rollup.Recorder()
    now = datetime.now(UTC).timestamp()
    for minute in range(90):
        for _ in range(1 + minute % 7):
            rec.record("default", "test.behave", "completed", 40 + 15 * (minute % 5),
                       at=now - 60 * minute)
        if minute % 11 == 0:
            rec.record("mail", "test.echo", "failed", 900, at=now - 60 * minute)
    rec.flush()
    for _ in range(4):
        make_job("COMPLETED", duration_ms=120)
    make_job(queue="mail")
    rollups.sample_depth()
    return make_job("FAILED", config={"do": "ok", "api_token": "do-not-show"})


def test_dashboard_changelist_and_retry_in_a_real_browser(page, live_server):
    failed = seed_activity()
    page.goto(f"{live_server.url}/admin/login/?next=/admin/django_pgjobs/dashboard/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_pgjobs/dashboard/")

    charts = page.locator("figure.pgjobs-chart")
    assert charts.count() == 3
    for i in range(3):
        box = charts.nth(i).bounding_box()
        assert box and box["width"] > 200 and box["height"] > 60, box
    assert page.locator("#pgjobs-chart-throughput polyline").count() == 3
    assert page.locator("#pgjobs-chart-durations .pgjobs-bar").count() >= 2
    assert page.locator("#pgjobs-queues").inner_text().count("mail") == 1
    page.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)

    page.click("text=Failed jobs")
    page.wait_for_url("**/job/?state=FAILED")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert "ValueError" in rows.first.inner_text()
    page.goto(f"{live_server.url}/admin/django_pgjobs/job/")
    page.click("#changelist-filter >> text=Failed")
    page.wait_for_url("**state=FAILED**")
    assert page.locator("#result_list tbody tr").count() == 1
    page.screenshot(path=str(SHOTS / "changelist.png"), full_page=True)

    page.check(f'input[name=_selected_action][value="{failed.id}"]')  # noqa: Q000
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    page.wait_for_selector("ul.messagelist")
    assert "Retry: 1 done" in page.locator("ul.messagelist").inner_text()
    assert Job.objects.get(pk=failed.id).status == "PENDING"

    run_worker()
    page.goto(f"{live_server.url}/admin/django_pgjobs/job/{failed.id}/change/")
    body = page.locator("#content").inner_text()
    assert "completed" in body and "do-not-show" not in body and "retried by admin:ops" in body
    page.screenshot(path=str(SHOTS / "job-detail.png"), full_page=True)
    assert Job.objects.get(pk=failed.id).status == "COMPLETED"
