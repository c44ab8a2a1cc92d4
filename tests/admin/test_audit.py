"""Bug 10 of issue 21: admin actions leave a trace (Django's LogEntry, and who/when on the job's
history), and delete asks first, as Django's own delete action does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.utils import timezone

from django_pgjobs.models import Job
from tests.admin.test_actions import act, fresh

pytestmark = pytest.mark.django_db


def entries(job_id: int) -> list[LogEntry]:
    return list(LogEntry.objects.filter(object_id=str(job_id)).order_by("id"))


@pytest.mark.parametrize(("action", "state", "outcome"), [
    ("retry_jobs", "FAILED", "manual_retry"),
    ("run_jobs_now", "PENDING", "run_now"),
    ("cancel_jobs", "PENDING", "cancel"),
    ("duplicate_jobs", "FAILED", "duplicated"),
])
def test_each_action_writes_a_log_entry_and_names_the_user_on_the_job(admin_client, action,
                                                                       state, outcome):
    from tests.admin.helpers import make_job

    job = make_job(state, run_after=timezone.now() + timedelta(hours=1))
    act(admin_client, action, job)
    logged = entries(job.id)
    assert [(e.action_flag, e.user.username) for e in logged] == [(CHANGE, "admin")], logged
    assert logged[0].object_repr == f"test.behave #{job.id}"
    last = fresh(job).history[-1]
    assert last["outcome"] == outcome and last["by"] == "admin:admin" and last["at"]
    if action == "duplicate_jobs":
        copy = Job.objects.exclude(pk=job.pk).get()
        assert last["job_id"] == copy.id
        assert [e.action_flag for e in entries(copy.id)] == [ADDITION]


def test_retry_completes_its_own_history_entry_instead_of_adding_one(admin_client):
    from tests.admin.helpers import make_job

    job = make_job("FAILED")
    act(admin_client, "retry_jobs", job)
    history = fresh(job).history
    assert len(history) == 1
    assert history[0]["outcome"] == "manual_retry" and history[0]["previous_status"] == "FAILED"
    assert history[0]["by"] == "admin:admin"


def test_delete_asks_for_confirmation_first(admin_client):
    from tests.admin.helpers import make_job

    done, running = make_job("COMPLETED"), make_job("RUNNING")
    response = act(admin_client, "delete_finished_jobs", done, running)
    html = response.content.decode()
    assert response.status_code == 200 and "Are you sure?" in html
    assert f"test.behave #{done.id}" in html and 'name="post" value="yes"' in html
    assert Job.objects.filter(pk=done.pk).exists()  # nothing deleted yet
    assert not LogEntry.objects.exists()
    act(admin_client, "delete_finished_jobs", done, running, post="yes")
    assert not Job.objects.filter(pk=done.pk).exists() and fresh(running).status == "RUNNING"
    logged = entries(done.id)
    assert [(e.action_flag, e.object_repr) for e in logged] == [
        (DELETION, f"test.behave #{done.id}")]
    assert entries(running.id) == []


def test_the_job_page_shows_who_retried_and_when(admin_client):
    from tests.admin.helpers import make_job

    job = make_job("FAILED")
    act(admin_client, "retry_jobs", job)
    html = admin_client.get(f"/admin/django_pgjobs/job/{job.id}/change/").content.decode()
    assert "retried by admin:admin (was failed" in html
