"""Admin of schedules and queues: lists, permission-gated actions, edits through the upserts."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_pgjobs.models import Queue, Schedule
from django_pgjobs.scheduler import enqueue_due
from tests.support.schedules import entry, utc

pytestmark = pytest.mark.django_db

SCHEDULES = reverse("admin:django_pgjobs_schedule_changelist")
QUEUES = reverse("admin:django_pgjobs_queue_changelist")


@pytest.fixture
def nightly(schedules):
    schedules(nightly=entry(cron="0 3 * * *", timezone="Europe/Paris"))
    enqueue_due(now=utc(2030, 1, 7, 12, 0))
    return Schedule.objects.get(name="nightly")


def staff(*perms: str) -> User:
    user = User.objects.create_user("ops", password="x", is_staff=True)  # noqa: S106
    user.user_permissions.set(Permission.objects.filter(codename__in=perms))
    return user


def act(client, url: str, action: str, *names: str):
    return client.post(url, {"action": action, "_selected_action": list(names)}, follow=True)


def test_the_schedule_list_shows_definition_last_and_next_run(admin_client, nightly):
    page = admin_client.get(SCHEDULES).content.decode()
    assert "nightly" in page and "test.echo" in page
    assert "0 3 * * * (Europe/Paris, catch up: latest)" in page
    assert "Jan. 8, 2030" in page  # next run: 03:00 Paris = 02:00 UTC on the 8th
    assert admin_client.get(reverse("admin:django_pgjobs_schedule_add")).status_code == 403


def test_disable_enable_and_run_now_actions(admin_client, nightly):
    act(admin_client, SCHEDULES, "disable", "nightly")
    s = Schedule.objects.get(name="nightly")
    assert not s.enabled and s.next_fire_time is None
    assert "disabled" in admin_client.get(SCHEDULES).content.decode()
    act(admin_client, SCHEDULES, "enable", "nightly")
    assert Schedule.objects.get(name="nightly").enabled
    page = act(admin_client, SCHEDULES, "run_now", "nightly").content.decode()
    assert Schedule.objects.get(name="nightly").run_now_requested
    assert "will fire once at the next scheduler pass" in page


def test_run_now_refuses_a_schedule_no_longer_defined(admin_client, nightly, schedules):
    schedules()
    page = act(admin_client, SCHEDULES, "run_now", "nightly").content.decode()
    assert "Not defined any more, not run: nightly" in page
    assert not Schedule.objects.get(name="nightly").run_now_requested


def test_actions_need_the_change_permission(client, nightly):
    client.force_login(staff("view_schedule", "view_queue"))
    assert client.get(SCHEDULES).status_code == 200
    act(client, SCHEDULES, "disable", "nightly")
    act(client, SCHEDULES, "run_now", "nightly")
    s = Schedule.objects.get(name="nightly")
    assert s.enabled and not s.run_now_requested
    Queue.objects.create(name="emails")
    act(client, QUEUES, "pause", "emails")
    assert not Queue.objects.get(name="emails").paused


def test_a_user_with_the_change_permission_may_act(client, nightly):
    client.force_login(staff("view_schedule", "change_schedule"))
    act(client, SCHEDULES, "disable", "nightly")
    assert not Schedule.objects.get(name="nightly").enabled


def test_queue_pause_and_resume_actions(admin_client):
    Queue.objects.create(name="emails")
    Queue.objects.create(name="reports")
    act(admin_client, QUEUES, "pause", "emails", "reports")
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == {
        "emails",
        "reports",
    }
    act(admin_client, QUEUES, "resume", "reports")
    assert list(Queue.objects.filter(paused=True).values_list("name", flat=True)) == ["emails"]


def test_adding_and_editing_a_queue_goes_through_the_upsert(admin_client):
    admin_client.post(
        reverse("admin:django_pgjobs_queue_add"),
        {"name": "emails", "paused": "on", "concurrency_limit": "2"},
    )
    q = Queue.objects.get(name="emails")
    assert (q.paused, q.concurrency_limit) == (True, 2)
    admin_client.post(
        reverse("admin:django_pgjobs_queue_change", args=["emails"]), {"concurrency_limit": ""}
    )
    q = Queue.objects.get(name="emails")
    assert (q.paused, q.concurrency_limit) == (False, None)


def test_a_negative_limit_is_refused_by_the_form(admin_client):
    page = admin_client.post(
        reverse("admin:django_pgjobs_queue_add"), {"name": "emails", "concurrency_limit": "-1"}
    ).content.decode()
    assert "errornote" in page
    assert not Queue.objects.exists()
