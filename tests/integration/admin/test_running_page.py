"""Issue 30.9: a running job's page says its progress in words (not only in a tooltip),
reloads itself while the job runs, and after a cancel request says so and offers no Cancel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.integration.admin.test_actions import act
from tests.support.admin import make_job

pytestmark = pytest.mark.django_db
URL = "/admin/django_pgjobs/job/{}/change/"


def running(**progress):
    now = timezone.now()
    return make_job(
        "RUNNING",
        started_at=now - timedelta(seconds=60),
        progress={"total": None, "note": None, "at": now.isoformat(), **progress},
    )


def page(client, job) -> str:
    return client.get(URL.format(job.id)).content.decode()


def test_progress_and_note_are_text_on_the_page(admin_client):
    html = page(admin_client, running(done=196, total=900, note="resizing images"))
    assert '<span class="pgjobs-progress-told">196 / 900 · resizing images · reported ' in html
    assert "22%" in html  # the bar
    html = page(admin_client, running(done=69))
    assert "69 done (no total given) · reported " in html and 'role="progressbar"' not in html


def test_a_running_job_page_reloads_itself_and_a_finished_one_does_not(admin_client):
    assert '<meta http-equiv="refresh" content="5">' in page(admin_client, running(done=1))
    assert 'http-equiv="refresh"' not in page(admin_client, make_job("COMPLETED"))


def test_after_a_cancel_request_the_page_says_so_and_offers_no_cancel(admin_client):
    job = running(done=3, total=10)
    assert 'value="cancel_jobs"' in page(admin_client, job)
    act(admin_client, "cancel_jobs", job)
    html = page(admin_client, job)
    assert "cancel requested: it stops when its handler checks job.cancel_requested" in html
    assert 'value="cancel_jobs"' not in html
    assert "cancel requested by admin:admin" in html  # the timeline
