"""Shared fixtures. The database is always a real PostgreSQL (DATABASE_URL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def eventually(
    condition: Callable[[], object],
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str = "condition",
) -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not met within {timeout}s (last value: {value!r})")
        time.sleep(interval)


def missing_requirement(what: str, how: str) -> None:
    """A test that needs something not installed FAILS, saying how to install it: a skip would
    hide untested behaviour. `./dev test` installs the extras always, and the Debian packages
    (chromium, faketime) when it runs as root."""
    pytest.fail(
        f"{what} is not installed: {how} (./dev test installs it when run as root)", pytrace=False
    )


def run_worker(**overrides: object) -> object:
    """The real Worker, in-process, in burst mode (no LISTEN, no signal handlers): it processes
    what is due and returns. Asserts a clean exit; returns the worker for its counters."""
    from django_pgjobs.worker import Worker, WorkerOptions

    opts: dict[str, object] = dict(
        burst=True, listen=False, install_signal_handlers=False, concurrency=2
    )
    opts.update(overrides)
    worker = Worker(WorkerOptions.from_settings(**opts))
    assert worker.run() == 0
    return worker


def sql(query: str, params: object = None) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def sql_one(query: str, params: object = None) -> object:
    rows = sql(query, params)
    return rows[0][0] if rows else None


def leases_expired() -> bool:
    """No RUNNING job holds a lease still valid by the database's clock (a condition for
    ``eventually``: the dead worker's jobs are now the reaper's)."""
    return not sql_one(
        "SELECT count(*) FROM pgjobs_job WHERE status = 'RUNNING' AND lease_expires_at > now()"
    )


def deadlocks() -> int:
    return int(sql_one("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


class WorkerProcess:
    """A real `manage.py runjobs` subprocess against the test database."""

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        self.args = list(args)
        full_env = dict(os.environ)
        full_env["PGJOBS_TEST_DB_NAME"] = connection.settings_dict["NAME"]
        full_env["PYTHONPATH"] = str(ROOT)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        self.log_path = (
            Path(os.environ.get("TMPDIR", "/tmp")) / f"pgjobs-worker-{os.getpid()}-{id(self)}.log"
        )
        self._log = open(self.log_path, "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "django", "runjobs", "--settings", "tests.settings", *args],
            cwd=ROOT,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._log.close()
        self.log_path.unlink(missing_ok=True)


@pytest.fixture
def start_worker() -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        w = WorkerProcess(*args, env=env)
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


@pytest.fixture(scope="session", autouse=True)
def _no_session_left_on_the_test_database(django_db_setup, django_db_blocker):
    """Threads that outlive their test (a live server, an abandoned handler thread) may keep a
    connection to the test database, and PostgreSQL refuses to drop a database in use: end
    them before pytest-django drops it."""
    yield
    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def logged_sql(query: dict, sent: str) -> str:
    """The SQL of a query Django's debug cursor logged, ``sent`` being what the execute
    wrapper saw. Django 6.1 logs the statement; 5.2 and 6.0 log None for a statement bound on
    the server (ours, prepared) on a connection that binds on the client."""
    import django

    if django.VERSION < (6, 1):
        assert query["sql"] is None, query
        return sent
    return query["sql"]
