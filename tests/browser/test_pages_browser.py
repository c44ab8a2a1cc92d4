"""Issue 21's proof: every admin page of the queue, light and dark, at 1440×900 and 1920×1080
with the sidebar open, screenshotted to test-artifacts/screenshots/, must have no element wider
than its container, no chart text under 11 px and no text under WCAG AA contrast (4.5:1)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.urls import reverse

from django_pgjobs import rollup
from django_pgjobs.scheduler import enqueue_due
from django_pgjobs.sql import queues, rollups
from tests.browser.conftest import SHOTS
from tests.conftest import sql
from tests.support.admin import make_job, make_workflow
from tests.support.schedules import clean_decorators, entry, schedules, utc  # noqa: F401

UTC = timezone.utc  # datetime.UTC is Python >= 3.11
CHECKS = (Path(__file__).parent / "checks.js").read_text()
SIZES = ((1440, 900), (1920, 1080))
LONG = (
    "ReportRenderingError: the quarterly report for tenant acme-industries-international "
    "could not be rendered because the template reports/quarterly/summary.html is missing"
)


def seed(schedules) -> dict[str, int]:  # noqa: F811
    rec = rollup.Recorder()
    now = datetime.now(UTC)
    earlier = now - timedelta(minutes=5)
    for minute in range(120):
        for _ in range(1 + minute % 5):
            rec.record("default", "test.behave", "completed", 60, at=now.timestamp() - 60 * minute)
        if minute % 9 == 0:
            rec.record("mail", "test.echo", "failed", 900, at=now.timestamp() - 60 * minute)
    rec.flush()
    for ms in (40, 60, 80):
        make_job("COMPLETED", duration_ms=ms)
    make_job("COMPLETED", type="test.echo", duration_ms=95_000, queue="reports")
    queues.set_queue_paused("mail", True)
    queues.set_queue_limit("reports", 1)
    for _ in range(3):
        make_job(queue="reports", run_after=now - timedelta(seconds=30))
        make_job(queue="mail", run_after=now - timedelta(seconds=30))
    make_job(type="no.such.handler.anywhere", run_after=now - timedelta(seconds=5))
    running = make_job(
        "RUNNING",
        queue="reports",
        started_at=now - timedelta(seconds=95),
        created_at=earlier,
        run_after=earlier,
        progress={"done": 420, "total": 1000, "note": "rows", "at": now.isoformat()},
    )
    sql(
        "INSERT INTO pgjobs_worker (worker_id, hostname, pid, queues, concurrency) VALUES "
        "('web-7f9c4d-2:4242:1a2b3c4d', 'web-7f9c4d-2', 4242, '[\"*\", \"mail\"]', 8)"
    )
    rollups.sample_depth()
    failed = make_job(
        "FAILED",
        type="reports.quarterly_summary_for_all_tenants",
        created_at=earlier,
        run_after=earlier,
        error=LONG,
        history=[
            {
                "attempt": 1,
                "worker": "w1",
                "outcome": "retry",
                "duration_ms": 300,
                "started_at": (now - timedelta(minutes=3)).isoformat(),
                "error": "TimeoutError: upstream",
            }
        ],
    )
    partial = make_job(
        "COMPLETED_WITH_ERRORS",
        created_at=earlier,
        result={"errors": [{"item": i, "error": f"row {i}: {LONG}"} for i in range(3)]},
    )
    schedules(nightly=entry(cron="0 3 * * *", timezone="Europe/Paris"))
    enqueue_due(now=utc(2030, 1, 7, 12, 0))
    return {
        "workflow": seed_workflow(),
        "failed": failed.id,
        "running": running.id,
        "partial": partial.id,
    }


def seed_workflow() -> int:
    """A workflow as an operator meets it: long step names, a group of 40 with failures, steps
    still waiting, two steps at one depth."""
    from django_pgjobs.models import Job

    wf = make_workflow(
        "nightly-import-of-every-marketplace-order-file",
        (
            ("fetch_orders_from_every_marketplace", 1, (), "COMPLETED"),
            (
                "parse_order_files_of_each_tenant",
                40,
                ("fetch_orders_from_every_marketplace",),
                "COMPLETED",
            ),
            ("validate_totals", 1, ("fetch_orders_from_every_marketplace",), "COMPLETED"),
            (
                "report_monthly_revenue_per_tenant_and_region",
                1,
                ("parse_order_files_of_each_tenant", "validate_totals"),
                "WAITING",
            ),
            ("notify", 1, ("report_monthly_revenue_per_tenant_and_region",), "WAITING"),
        ),
    )
    Job.objects.filter(
        workflow_id=wf, step="parse_order_files_of_each_tenant", config__part__lt=3
    ).update(status="FAILED", error=LONG, result={})
    return wf


def pages(ids: dict[str, int]) -> list[tuple[str, str]]:
    job = "/admin/django_pgjobs/job/"
    return [
        ("dashboard", reverse("admin:django_pgjobs_dashboard_changelist") + "?refresh=0"),
        ("jobs", job),
        ("jobs-failed", job + "?state=FAILED"),
        ("job-failed", f"{job}{ids['failed']}/change/"),
        ("job-running", f"{job}{ids['running']}/change/"),
        ("job-item-errors", f"{job}{ids['partial']}/change/"),
        ("queues", reverse("admin:django_pgjobs_queue_changelist")),
        ("schedules", reverse("admin:django_pgjobs_schedule_changelist")),
        ("workflow", reverse("admin:django_pgjobs_workflow", args=[ids["workflow"]])),
    ]


LIST_CHECKS = """() => {
  const rows = [...document.querySelectorAll('#result_list tbody tr')];
  const heights = rows.map((r) => r.getBoundingClientRect().height);
  const err = document.querySelector('#result_list td.field-detail_col .pgjobs-err');
  const box = err && err.getBoundingClientRect();
  const results = document.querySelector('.results').getBoundingClientRect();
  return {rows: rows.length, tallest: Math.max(...heights), lowest: Math.min(...heights),
          error: box ? {width: box.width, right: box.right, limit: results.right} : null};
}"""


def list_problems(name: str, pg) -> list[str]:
    """One line per row; on the Failed view the error shows, inside the list, readable."""
    m = pg.evaluate(LIST_CHECKS)
    out = []
    if m["rows"] and m["tallest"] > max(40, m["lowest"] + 2):
        out.append(f"rows of different heights (one wraps): {m['lowest']}..{m['tallest']} px")
    if name == "jobs-failed":
        e = m["error"]
        if not e or e["width"] < 150 or e["right"] > e["limit"] + 1:
            out.append(f"the error is not visible in the Failed view: {e}")
    return out


def login(pg, base: str) -> None:
    pg.goto(f"{base}/admin/login/")
    pg.fill("#id_username", "ops")
    pg.fill("#id_password", "secret-pw")
    pg.click("input[type=submit]")
    pg.wait_for_url(f"{base}/admin/")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_fits_reads_and_contrasts(
    admin_static,
    browser,
    live_server,
    transactional_db,
    monkeypatch,
    schedules,  # noqa: F811
    scheme,
):
    from django.contrib.auth.models import User

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    User.objects.create_superuser("ops", "ops@example.com", "secret-pw")
    SHOTS.mkdir(parents=True, exist_ok=True)
    ids = seed(schedules)
    problems = []
    for width, height in SIZES:
        context = browser.new_context(
            viewport={"width": width, "height": height}, color_scheme=scheme
        )
        pg = context.new_page()
        pg.set_default_timeout(15_000)
        login(pg, live_server.url)
        for name, url in pages(ids):
            pg.goto(live_server.url + url)
            assert pg.locator("#nav-sidebar").is_visible(), "the sidebar should be open"
            pg.screenshot(path=str(SHOTS / f"{name}-{width}x{height}-{scheme}.png"), full_page=True)
            found = pg.evaluate(CHECKS) + (
                list_problems(name, pg) if name.startswith("jobs") else []
            )
            problems += [f"{name} {width}x{height} {scheme}: {p}" for p in found]
        context.close()
    assert not problems, "\n".join(problems)


def test_the_dashboard_refreshes_itself(page, live_server):
    """dashboard.js swaps the live part of the page: a job started after the page loaded
    shows up without a reload."""
    login(page, live_server.url)
    page.goto(live_server.url + reverse("admin:django_pgjobs_dashboard_changelist") + "?refresh=5")
    assert "No job is running." in page.locator("#pgjobs-running").inner_text()
    page.evaluate("window.pgjobsMarker = 1")  # gone if the page were reloaded
    job = make_job("RUNNING", type="test.echo")
    page.wait_for_function(
        f"document.querySelector('#pgjobs-running').innerText.includes('#{job.id}')", timeout=12_000
    )
    assert page.evaluate("window.pgjobsMarker") == 1
