"""manage.py pgjobs_queue writes pgjobs_queue (the claim enforcing it is tested elsewhere)."""

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_pgjobs import enqueue
from django_pgjobs.models import Queue
from tests.conftest import sql

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("pgjobs_queue", *args, stdout=out)
    return out.getvalue()


def row(name: str) -> tuple[bool, int | None]:
    q = Queue.objects.get(name=name)
    return q.paused, q.concurrency_limit


def test_pause_and_resume_upsert_the_row():
    assert run("pause", "emails") == "queue emails: paused, no concurrency limit\n"
    assert row("emails") == (True, None)
    assert run("pause", "emails") == "queue emails: paused, no concurrency limit\n"  # idempotent
    assert run("resume", "emails") == "queue emails: open, no concurrency limit\n"
    assert row("emails") == (False, None)


def test_limit_sets_and_clears_the_cap_without_touching_pause():
    run("pause", "emails")
    assert run("limit", "emails", "2") == "queue emails: paused, at most 2 running\n"
    assert row("emails") == (True, 2)
    assert run("limit", "emails", "none") == "queue emails: paused, no concurrency limit\n"
    assert row("emails") == (True, None)
    run("limit", "reports", "0")  # a new row: open, capped at 0
    assert row("reports") == (False, 0)


def test_updated_at_moves_on_each_change():
    run("pause", "q")
    sql("UPDATE pgjobs_queue SET updated_at = now() - interval '1 day' WHERE name = 'q'")
    run("resume", "q")
    assert sql("SELECT updated_at > now() - interval '1 minute' FROM pgjobs_queue")[0][0]


def test_list_shows_controls_and_job_counts_of_every_queue():
    run("pause", "emails")
    run("limit", "idle", "3")
    enqueue("test.echo", queue="emails")
    enqueue("test.echo", queue="emails", run_after=3600)
    enqueue("test.echo", queue="default")
    lines = run("list").splitlines()
    assert lines[0].split() == [
        *("QUEUE", "STATE", "LIMIT", "PER_KEY", "RATE", "DUE", "LATER", "RUNNING", "HELD", "FAIR"),
        "WHY",
    ]
    table = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert table == {  # flow control's columns: tests/integration/test_flow_control.py
        "default": ["open", "-", "-", "-", "1", "0", "0", "0", "-"],
        "emails": ["paused", "-", "-", "-", "1", "1", "0", "1", "-", "paused"],
        "idle": ["open", "3", "-", "-", "0", "0", "0", "0", "-"],
    }


def test_list_says_when_there_is_nothing():
    assert run("list") == "no queue has controls or active jobs\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause", "bad queue"], "invalid queue name"),
        (["limit", "emails", "-1"], "integer >= 0 or 'none'"),
        (["limit", "emails", "lots"], "integer >= 0 or 'none'"),
        (["stop", "emails"], "invalid choice"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Queue.objects.exists()
