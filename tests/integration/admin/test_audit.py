"""Bug 10 of issue 21: admin actions leave a trace (Django's LogEntry, and who/when on the job's
history), and delete asks first, as Django's own delete action does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.utils import timezone

from django_pgjobs.models import Job
from tests.integration.admin.test_actions import act, fresh
from tests.support.schedules import schedules  # noqa: F401,F811 - a fixture

pytestmark = pytest.mark.django_db


def entries(job_id: int) -> list[LogEntry]:
    return list(LogEntry.objects.filter(object_id=str(job_id)).order_by("id"))


@pytest.mark.parametrize(
    ("action", "state", "outcome"),
    [
        ("retry_jobs", "FAILED", "manual_retry"),
        ("run_jobs_now", "PENDING", "run_now"),
        ("cancel_jobs", "PENDING", "cancel"),
        ("duplicate_jobs", "FAILED", "duplicated"),
    ],
)
def test_each_action_writes_a_log_entry_and_names_the_user_on_the_job(
    admin_client, action, state, outcome
):
    from tests.support.admin import make_job

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
    from tests.support.admin import make_job

    job = make_job("FAILED")
    act(admin_client, "retry_jobs", job)
    history = fresh(job).history
    assert len(history) == 1
    assert history[0]["outcome"] == "manual_retry" and history[0]["previous_status"] == "FAILED"
    assert history[0]["by"] == "admin:admin"


def test_delete_asks_for_confirmation_first(admin_client):
    from tests.support.admin import make_job

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
        (DELETION, f"test.behave #{done.id}")
    ]
    assert entries(running.id) == []


def test_the_job_page_shows_who_retried_and_when(admin_client):
    from tests.support.admin import make_job

    job = make_job("FAILED")
    act(admin_client, "retry_jobs", job)
    html = admin_client.get(f"/admin/django_pgjobs/job/{job.id}/change/").content.decode()
    assert "retried by admin:admin (was failed" in html


# --- issue 30.2: queue and schedule actions, the command, and which cancel happened -----------

QUEUES = "/admin/django_pgjobs/queue/"
SCHEDULES = "/admin/django_pgjobs/schedule/"


def logged(model: str, name: str) -> list[tuple[str, str]]:
    return [
        (e.user.username, e.change_message)
        for e in LogEntry.objects.filter(content_type__model=model, object_id=name).order_by("id")
    ]


def post_action(client, url: str, action: str, *names: str):
    return client.post(url, {"action": action, "_selected_action": list(names)}, follow=True)


def test_queue_pause_and_resume_are_on_the_queue_history_page(admin_client):
    from django_pgjobs.models import Queue

    Queue.objects.create(name="emails")
    post_action(admin_client, QUEUES, "pause", "emails")
    post_action(admin_client, QUEUES, "resume", "emails")
    assert logged("queue", "emails") == [
        ("admin", "Paused (running jobs finish)"),
        ("admin", "Resumed"),
    ]
    html = admin_client.get(f"{QUEUES}emails/history/").content.decode()
    assert "Paused (running jobs finish)" in html and "Resumed" in html and "admin" in html


def test_schedule_enable_disable_and_run_now_are_logged(admin_client, schedules):  # noqa: F811
    from django_pgjobs.models import Schedule
    from django_pgjobs.scheduler import enqueue_due
    from tests.support.schedules import entry, utc

    schedules(nightly=entry(cron="0 3 * * *"))
    enqueue_due(now=utc(2030, 1, 7, 12, 0))
    assert Schedule.objects.filter(name="nightly").exists()
    for action in ("disable", "enable", "run_now"):
        post_action(admin_client, SCHEDULES, action, "nightly")
    assert [m for _, m in logged("schedule", "nightly")] == [
        "Disabled",
        "Enabled (fires from its next tick)",
        "Run now requested (fires once at the next scheduler pass)",
    ]
    html = admin_client.get(f"{SCHEDULES}nightly/history/").content.decode()
    assert "Run now requested" in html


def test_pgjobs_queue_records_the_os_user_as_the_command_user():
    import getpass
    import io

    from django.contrib.auth.models import User
    from django.core.management import call_command

    for args in (
        ("pause", "bulk"),
        ("limit", "bulk", "3"),
        ("limit", "bulk", "none"),
        ("resume", "bulk"),
    ):
        call_command("pgjobs_queue", *args, stdout=io.StringIO())
    entries_ = logged("queue", "bulk")
    assert [u for u, _ in entries_] == ["pgjobs-command"] * 4
    assert [m.split(" (")[0] for _, m in entries_] == [
        "Paused",
        "Limit set to 3",
        "Limit removed",
        "Resumed",
    ]
    assert f"(pgjobs_queue, OS user {getpass.getuser()} on " in entries_[0][1]
    user = User.objects.get(username="pgjobs-command")
    assert not user.is_active and not user.has_usable_password()


def test_cancel_entries_say_which_happened(admin_client):
    from tests.support.admin import make_job

    pending, running = make_job("PENDING"), make_job("RUNNING")
    act(admin_client, "cancel_jobs", pending, running)
    assert [e.change_message for e in entries(pending.id)] == ["Cancelled"]
    assert [e.change_message for e in entries(running.id)] == ["Cancel requested while running"]
