"""Bugs 6, 7 and 8: what a first try ran into. E007's hint names the ENGINE; a @task no worker
can import is refused at enqueue; unknown job types are logged once per type by the worker;
--queues with a queue nothing names warns; a schedule without `type` says so."""

import time

import pytest
from django.db import connections
from django.test import override_settings

from django_pgjobs import checks, scheduler
from django_pgjobs.tasks_api import InvalidTask, task
from tests.conftest import eventually, sql
from tests.support.commands import manage


def test_e007_names_the_engine_to_use(monkeypatch):
    monkeypatch.setitem(connections.settings, "lite", {"ENGINE": "django.db.backends.sqlite3"})
    with override_settings(PGJOBS={"DATABASE": "lite"}):
        [error] = [e for e in checks.check_settings() if e.id == "pgjobs.E007"]
    assert "django.db.backends.sqlite3" in error.msg
    assert "DATABASES['lite']['ENGINE'] = 'django.db.backends.postgresql'" in error.hint


def test_the_readme_says_to_point_databases_at_postgresql():
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install in your project") : readme.index("## Five-minute")]
    assert '"ENGINE": "django.db.backends.postgresql"' in install


# --- bug 7 ---------------------------------------------------------------------------------


def test_a_task_defined_in_main_is_refused_at_enqueue():
    namespace = {"__name__": "__main__", "task": task}
    exec("@task()\ndef local_job(x):\n    return x\n", namespace)  # noqa: S102 - a script's body
    with pytest.raises(InvalidTask, match="where no worker can import it"):
        namespace["local_job"].enqueue(1)


def test_a_task_defined_in_a_shell_is_refused_at_enqueue():
    done = manage(
        "shell",
        "-c",
        "from django_pgjobs.tasks_api import task\n"
        "@task()\ndef typed_in_shell():\n    pass\n"
        "try: typed_in_shell.enqueue()\n"
        "except Exception as e: print(type(e).__name__, e)",
    )
    assert "InvalidTask" in done.stdout and "where no worker can import it" in done.stdout, (
        done.stdout + done.stderr[-2000:]
    )


@pytest.mark.django_db(transaction=True)
def test_a_task_of_an_app_module_is_accepted():
    from tests.testapp.tasks import add

    assert add.enqueue(1, 2).status == "READY"
    assert add.using(priority=5).enqueue(1, 2).status == "READY"


@pytest.mark.django_db(transaction=True)
def test_the_worker_logs_each_unknown_type_once(start_worker):
    for job_type in ("gone.a", "gone.a", "gone.b"):
        sql("INSERT INTO pgjobs_job (type, queue, config) VALUES (%s, 'default', '{}')", [job_type])
    w = start_worker("--poll-interval", "0.1", "-v", "1")
    eventually(
        lambda: "gone.b" in w.output() and "gone.a" in w.output(),
        timeout=30,
        message="unknown types logged",
    )
    time.sleep(1.5)  # time under test: a dozen polls, none of which logs a type again
    w.signal(15)
    assert w.wait(timeout=30) == 0, w.output()[-3000:]
    lines = [ln for ln in w.output().splitlines() if "job.unknown_type" in ln]
    assert len(lines) == 2, lines
    assert any("gone.a: 2 due jobs" in ln for ln in lines), lines


# --- bug 8 ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_queues_nobody_names_are_warned_about():
    done = manage(
        "runjobs",
        "--burst",
        "--queues",
        "default,emails,nosuchqueue",
        db_name=connections["default"].settings_dict["NAME"],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("WARNING: --queues")]
    assert len(warnings) == 1 and "'nosuchqueue'" in warnings[0], done.stderr[-2000:]


@pytest.mark.django_db(transaction=True)
def test_a_queue_with_pending_jobs_is_known():
    sql("INSERT INTO pgjobs_job (type, queue, config) VALUES ('test.noop', 'adhoc', '{}')")
    done = manage(
        "runjobs",
        "--burst",
        "--queues",
        "adhoc",
        db_name=connections["default"].settings_dict["NAME"],
    )
    assert done.returncode == 0 and "WARNING: --queues" not in done.stderr, done.stderr[-2000:]


def test_a_schedule_without_type_says_so():
    with override_settings(PGJOBS={"SCHEDULES": {"nightly": {"cron": "0 3 * * *"}}}):
        _, problems = scheduler.load()
    assert [p.message for p in problems] == [
        "schedule 'nightly': no 'type': name the job type it enqueues (a @handler's type)"
    ]
