"""Admin actions: each goes through queries.py, needs its own permission, and reports
"n done, m skipped (reason)"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from django_pgjobs.models import Job
from tests.support.admin import make_job, staff_user

pytestmark = pytest.mark.django_db
URL = "/admin/django_pgjobs/job/"


def act(client, action, *jobs, **extra):
    data = {"action": action, "index": 0, "_selected_action": [j.id for j in jobs], **extra}
    return client.post(URL, data, follow=True)


def message(response) -> str:
    return " | ".join(str(m) for m in get_messages(response.wsgi_request)) or " | ".join(
        str(m) for m in response.context["messages"]
    )


def fresh(job) -> Job:
    return Job.objects.get(pk=job.pk)


def test_retry_moves_failed_jobs_to_pending_and_skips_the_others(admin_client):
    failed, running = make_job("FAILED"), make_job("RUNNING")
    response = act(admin_client, "retry_jobs", failed, running)
    text = message(response)
    assert "Retry: 1 done, 1 skipped (1 running: only failed" in text
    assert fresh(failed).status == "PENDING" and fresh(failed).attempts == 0
    assert fresh(running).status == "RUNNING"
    assert fresh(failed).history[-1]["outcome"] == "manual_retry"


def test_run_now_makes_scheduled_jobs_due(admin_client):
    later = make_job(run_after=timezone.now() + timedelta(hours=2))
    done = make_job("COMPLETED")
    text = message(act(admin_client, "run_jobs_now", later, done))
    assert "Run now: 1 done, 1 skipped (1 completed: only pending jobs due later" in text
    assert fresh(later).run_after <= timezone.now()


def test_cancel_cancels_pending_and_requests_running(admin_client):
    pending, running, done = make_job(), make_job("RUNNING"), make_job("COMPLETED")
    text = message(act(admin_client, "cancel_jobs", pending, running, done))
    assert "Cancel: 2 done (1 cancelled, 1 running: cancel requested" in text
    assert "1 skipped (1 completed" in text
    assert fresh(pending).status == "CANCELLED"
    assert fresh(running).status == "RUNNING" and fresh(running).cancel_requested


def test_duplicate_enqueues_a_copy(admin_client):
    original = make_job(
        "FAILED", config={"do": "ok", "n": 7}, tenant_id="acme", trace_id="abc123abc123"
    )
    unknown = make_job("FAILED", type="no.such.type")
    text = message(act(admin_client, "duplicate_jobs", original, unknown))
    assert "Duplicate: 1 done, 1 skipped (1 failed: job type not registered" in text
    copy = Job.objects.exclude(pk__in=[original.pk, unknown.pk]).get()
    assert (copy.status, copy.type, copy.config, copy.tenant_id, copy.trace_id) == (
        "PENDING",
        "test.behave",
        {"do": "ok", "n": 7},
        "acme",
        "abc123abc123",
    )
    assert copy.operated_by == "admin:admin" and copy.attempts == 0


def test_delete_only_removes_finished_jobs(admin_client):
    done, pending = make_job("COMPLETED"), make_job()
    text = message(act(admin_client, "delete_finished_jobs", done, pending, post="yes"))
    assert "Delete: 1 done, 1 skipped (1 pending: pending or running jobs are not deleted" in text
    assert (
        not Job.objects.filter(pk=done.pk).exists() and Job.objects.filter(pk=pending.pk).exists()
    )


def test_djangos_delete_selected_is_not_offered(admin_client):
    make_job()
    html = admin_client.get(URL).content.decode()
    assert "delete_selected" not in html and "delete_finished_jobs" in html


@pytest.mark.parametrize(
    ("action", "perm", "state"),
    [
        ("retry_jobs", "retry_job", "FAILED"),
        ("run_jobs_now", "run_job_now", "PENDING"),
        ("cancel_jobs", "cancel_job", "PENDING"),
        ("duplicate_jobs", "duplicate_job", "FAILED"),
        ("delete_finished_jobs", "delete_job", "FAILED"),
    ],
)
def test_a_crafted_post_without_the_permission_changes_nothing(client, action, perm, state):
    job = make_job(state, run_after=timezone.now() + timedelta(hours=1))
    before = Job.objects.filter(pk=job.pk).values().get()
    client.force_login(staff_user("viewer", "view_job"))
    response = act(client, action, job, post="yes")
    assert response.status_code == 200
    assert Job.objects.count() == 1
    assert Job.objects.filter(pk=job.pk).values().get() == before
    client.force_login(staff_user("operator", "view_job", perm))  # with it, the action runs
    act(client, action, job, post="yes")
    after = Job.objects.filter(pk=job.pk).values().first()
    assert after != before or Job.objects.count() == 2


def test_select_across_a_huge_selection_is_refused(admin_client, monkeypatch):
    from django_pgjobs import admin as jobs_admin

    monkeypatch.setattr(jobs_admin, "ACTION_LIMIT", 2)
    jobs = [make_job("FAILED") for _ in range(3)]
    text = message(act(admin_client, "retry_jobs", jobs[0], select_across=1))
    assert "Nothing done: at most 2 jobs per action" in text
    assert all(fresh(j).status == "FAILED" for j in jobs)
