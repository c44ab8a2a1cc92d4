"""Issue 30.9 in a real Chromium: a running job's page reloads itself, so the progress it shows
follows the handler's reports, and it stops reloading once the job has finished."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from django_pgjobs.models import Job
from tests.browser.conftest import SHOTS
from tests.support.admin import make_job


def test_running_job_page_follows_progress_then_stops_reloading(page, live_server):
    now = timezone.now()
    job = make_job(
        "RUNNING",
        started_at=now - timedelta(seconds=30),
        progress={"done": 196, "total": 900, "note": "resizing", "at": now.isoformat()},
    )
    url = f"/admin/django_pgjobs/job/{job.id}/change/"
    page.goto(f"{live_server.url}/admin/login/?next={url}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{url}")
    assert "196 / 900 · resizing" in page.locator(".pgjobs-kv").inner_text()
    page.screenshot(path=str(SHOTS / "job-running.png"), full_page=True)

    Job.objects.filter(pk=job.pk).update(
        progress={"done": 450, "total": 900, "note": "half", "at": timezone.now().isoformat()}
    )
    page.wait_for_function(
        "document.querySelector('.pgjobs-kv').innerText.includes('450 / 900 · half')",
        timeout=20_000,
    )

    Job.objects.filter(pk=job.pk).update(
        status="COMPLETED", finished_at=timezone.now(), lease_token=None, lease_expires_at=None
    )
    page.wait_for_function("!document.querySelector('meta[http-equiv=refresh]')", timeout=20_000)
    assert "completed" in page.locator(".pgjobs-kv").inner_text()
