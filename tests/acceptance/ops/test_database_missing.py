"""Bugs 4 and 5: the commands and enqueue() facing a database that is not migrated or not
there at all: a clear message and an exit status, never a raw traceback or a hang."""

import json
import time
import uuid

import pytest
from django.db import connection

from tests.conftest import sql
from tests.support.commands import DOWN, manage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def empty_db():
    """A database of the same server without any table."""
    name = f"pgjobs_empty_{uuid.uuid4().hex[:8]}"
    sql(f'CREATE DATABASE "{name}"')
    yield name
    sql(f'DROP DATABASE "{name}" WITH (FORCE)')


MIGRATE = "run `manage.py migrate` first"


@pytest.mark.parametrize(
    "command", [("runjobs", "--burst"), ("pgjobs_stats",), ("pgjobs_stats", "--json")]
)
def test_commands_before_migrate_say_run_migrate(empty_db, command):
    done = manage(*command, db_name=empty_db)
    assert done.returncode == 1, done.stderr[-2000:]
    assert MIGRATE in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_enqueue_before_migrate_says_run_migrate(empty_db):
    done = manage(
        "shell",
        "-c",
        "from django_pgjobs import enqueue, enqueue_many\n"
        "for f in (lambda: enqueue('test.noop'), "
        "lambda: enqueue_many('test.noop', [{}])):\n"
        "    try: f()\n"
        "    except Exception as e: print(type(e).__name__, e)",
        db_name=empty_db,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("Not")]
    assert len(lines) == 2 and all(
        ln.startswith("NotMigrated") and MIGRATE in ln for ln in lines
    ), done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_health_before_migrate_is_unhealthy(empty_db, as_json):
    done = manage("pgjobs_health", *(["--json"] if as_json else []), db_name=empty_db)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    if as_json:
        report = json.loads(done.stdout)
        assert report["healthy"] is False and MIGRATE in report["problems"][0]
    else:
        assert (
            f"UNHEALTHY: the django-pgjobs tables do not exist in database 'default': "
            f"{MIGRATE}" in done.stderr
        )


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_health_with_the_database_down_is_unhealthy(as_json):
    done = manage("pgjobs_health", *(["--json"] if as_json else []), url=DOWN)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    if as_json:
        report = json.loads(done.stdout)
        assert report["healthy"] is False and report["metrics"] is None
        assert report["problems"][0].startswith("cannot reach database 'default': Operational")
    else:
        assert "UNHEALTHY: cannot reach database 'default'" in done.stderr
        assert len(done.stderr.splitlines()) <= 3, done.stderr


def test_burst_gives_up_on_an_unreachable_database():
    started = time.monotonic()
    done = manage("runjobs", "--burst", "--give-up-after", "2", url=DOWN, timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 4, done.stderr[-3000:]
    assert "stayed unreachable for 2s" in done.stderr and "giving up" in done.stderr
    assert took < 20, took


def test_give_up_after_is_checked():
    done = manage("runjobs", "--burst", "--give-up-after", "0", url=DOWN)
    assert done.returncode == 2 and "expected a number of seconds > 0" in done.stderr
    assert connection.vendor == "postgresql"
