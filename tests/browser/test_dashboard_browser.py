"""A real headless Chromium (Debian's package, driven by Playwright's Python package): log in,
see the dashboard's charts render, filter the changelist, retry a failed job, see it complete
after a worker run. Screenshots go to test-artifacts/screenshots/.

Under CI=true a missing browser or Playwright is a failure, never a skip.
"""

from __future__ import annotations

from datetime import datetime, timezone

from django.test.testcases import LiveServerThread, QuietWSGIRequestHandler, _StaticFilesHandler

from django_pgjobs import rollup
from django_pgjobs.models import Job
from django_pgjobs.sql import rollups
from tests.browser.conftest import SHOTS
from tests.support.admin import make_job
from tests.support.observability import run_worker

UTC = timezone.utc  # datetime.UTC is Python >= 3.11


def seed_activity() -> Job:
    rec = rollup.Recorder()
    now = datetime.now(UTC).timestamp()
    for minute in range(90):
        for _ in range(1 + minute % 7):
            rec.record(
                "default", "test.behave", "completed", 40 + 15 * (minute % 5), at=now - 60 * minute
            )
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


class _OneRequestHandler(QuietWSGIRequestHandler):
    """Closes the connection after each answer: once the server stops, nothing answers."""

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()


class _RestartableServer(LiveServerThread):
    """A live server that can be stopped and started again on the same port."""

    def _create_server(self, connections_override=None):
        return self.server_class(
            (self.host, self.port),
            _OneRequestHandler,
            allow_reuse_address=True,
            connections_override=connections_override,
        )


def _start_server(port: int = 0) -> _RestartableServer:
    thread = _RestartableServer("localhost", _StaticFilesHandler, port=port)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    return thread


def _log_in(page, base: str, next_url: str) -> None:
    page.goto(f"{base}/admin/login/?next={next_url}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}")


def test_dashboard_says_stale_when_its_refresh_fails_and_signed_out_when_logged_out(page):
    make_job(queue="mail")
    server = _start_server()
    base, port = f"http://localhost:{server.port}", server.port
    dash = "/admin/django_pgjobs/dashboard/"
    try:
        _log_in(page, base, dash)
        page.goto(f"{base}{dash}?refresh=5")
        banner, live = page.locator("#pgjobs-stale"), page.locator("#pgjobs-live")
        assert banner.is_hidden()
        updated = page.locator("#pgjobs-updated").inner_text()

        server.terminate()  # the server goes away between two refreshes
        page.wait_for_selector("#pgjobs-stale[data-reason=failed]", timeout=30_000)
        text = banner.inner_text()
        assert "Not live" in text and "could not be reached" in text, text
        assert updated in text  # the time of the last good refresh
        assert "pgjobs-stale-numbers" in live.get_attribute("class")
        assert (
            page.evaluate("getComputedStyle(document.getElementById('pgjobs-live')).opacity")
            == "0.45"
        )
        page.screenshot(path=str(SHOTS / "dashboard-stale.png"), full_page=True)

        server = _start_server(port)  # back: the next retry makes the page live again
        page.wait_for_selector("#pgjobs-stale", state="hidden", timeout=30_000)
        assert "pgjobs-stale-numbers" not in (live.get_attribute("class") or "")

        other = page.context.new_page()  # log out in another tab: the session ends
        other.goto(f"{base}/admin/")
        other.click("#logout-form button")
        other.wait_for_url("**/logout/")
        page.wait_for_selector("#pgjobs-stale[data-reason=signed-out]", timeout=30_000)
        assert "Signed out" in banner.inner_text()
        link = page.locator("#pgjobs-stale-login")
        assert link.get_attribute("href") == (
            "/admin/login/?next=%2Fadmin%2Fdjango_pgjobs%2Fdashboard%2F%3Frefresh%3D5"
        )
        page.screenshot(path=str(SHOTS / "dashboard-signed-out.png"), full_page=True)

        _log_in(other, base, dash)  # logged in again: the next retry is live
        page.wait_for_selector("#pgjobs-stale", state="hidden", timeout=30_000)
    finally:
        server.terminate()
