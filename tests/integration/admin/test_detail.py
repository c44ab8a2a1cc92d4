"""The job detail page: read-only, redacted, escaped, with attempts and a timeline."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgjobs.admin import error_summary, redact
from django_pgjobs.models import Job
from tests.support.admin import TRACEBACK, make_job, staff_user

pytestmark = pytest.mark.django_db


def detail(client, job) -> str:
    response = client.get(f"/admin/django_pgjobs/job/{job.id}/change/")
    assert response.status_code == 200
    return response.content.decode()


def failed_job() -> Job:
    return make_job(
        "FAILED",
        config={
            "user": "<script>alert(1)</script>",
            "password": "hunter2",
            "nested": {"Api_Token": "t0k3n", "items": [{"secret_key": "s"}]},
        },
        result={"partial": 3, "authorization": "Bearer x"},
        history=[
            {
                "attempt": 1,
                "worker": "w1",
                "started_at": "2026-01-01T00:00:00+00:00",
                "duration_ms": 120,
                "error": "RuntimeError: <img src=x onerror=alert(2)>",
                "outcome": "retry",
            },
            {
                "attempt": 2,
                "worker": "w2",
                "started_at": "2026-01-01T00:01:00+00:00",
                "duration_ms": 80,
                "error": TRACEBACK,
                "outcome": "attempts_exhausted",
            },
        ],
    )


def test_detail_shows_redacted_pretty_config_result_error_history_and_timeline(admin_client):
    html = detail(admin_client, failed_job())
    assert "hunter2" not in html and "t0k3n" not in html and "Bearer x" not in html
    assert '"password": "********"' in html.replace("&quot;", '"')
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html and "<img src=x" not in html
    assert "Traceback (most recent call last)" in html  # the full error
    assert "<b>ValueError</b>: card &lt;b&gt;declined&lt;/b&gt;" in html
    assert "failed, no attempts left" in html and "w2" in html and "120 ms" in html
    assert "attempt 1 started on w1" in html and "enqueued" in html


def test_detail_is_read_only(admin_client):
    job = failed_job()
    html = detail(admin_client, job)
    assert 'name="_save"' not in html and "<textarea" not in html
    response = admin_client.post(
        f"/admin/django_pgjobs/job/{job.id}/change/",
        {"type": "evil", "status": "COMPLETED", "config": "{}"},
    )
    assert response.status_code == 403
    job.refresh_from_db()
    assert (job.type, job.status) == ("test.behave", "FAILED")


def test_detail_offers_only_the_actions_the_user_may_take(client):
    job = failed_job()
    client.force_login(staff_user("op", "view_job", "retry_job"))
    html = detail(client, job)
    assert 'value="retry_jobs"' in html
    assert 'value="duplicate_jobs"' not in html and 'value="cancel_jobs"' not in html


def test_retry_button_on_the_detail_page_comes_back_to_it(admin_client):
    job = failed_job()
    response = admin_client.post(
        "/admin/django_pgjobs/job/",
        {"action": "retry_jobs", "index": 0, "_selected_action": job.id, "_pgjobs_next": "detail"},
    )
    assert response.status_code == 302
    assert response.url == f"/admin/django_pgjobs/job/{job.id}/change/"
    job.refresh_from_db()
    assert job.status == "PENDING"


def test_running_jobs_cannot_be_deleted_from_the_detail_page(admin_client):
    job = make_job("RUNNING")
    assert admin_client.get(f"/admin/django_pgjobs/job/{job.id}/delete/").status_code == 403
    done = make_job("COMPLETED")
    admin_client.post(f"/admin/django_pgjobs/job/{done.id}/delete/", {"post": "yes"})
    assert not Job.objects.filter(pk=done.id).exists()


@override_settings(PGJOBS={"REDACT_KEYS": ["card"]})
def test_redaction_keys_come_from_the_setting():
    assert redact({"card_number": "4242", "password": "p"}) == {
        "card_number": "********",
        "password": "p",
    }


def test_error_summary():
    assert error_summary(TRACEBACK) == ("ValueError", "card <b>declined</b>")
    assert error_summary("lease expired: worker w stopped") == (
        "",
        "lease expired: worker w stopped",
    )
    assert error_summary(None) == ("", "")
    chained = (
        TRACEBACK + "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'k'\n"
    )
    assert error_summary(chained) == ("KeyError", "'k'")
