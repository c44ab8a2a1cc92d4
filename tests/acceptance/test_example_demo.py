"""Smoke test of the example project: `manage.py demo` runs end to end on its own database."""

import os
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture
def example_db():
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    name = f"{connection.settings_dict['NAME']}_example"[:63]
    admin = {**params, "dbname": "postgres"}
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    yield f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name}"
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_demo_runs_end_to_end(example_db):
    env = dict(
        os.environ,
        DATABASE_URL=example_db,
        PYTHONPATH=str(ROOT),
        DJANGO_SETTINGS_MODULE="example.settings",
    )
    env.pop("PGJOBS_TEST_DB_NAME", None)
    manage = [sys.executable, str(ROOT / "example_project" / "manage.py")]
    subprocess.run(
        [*manage, "migrate", "--noinput", "-v", "0"],
        env=env,
        check=True,  # noqa: S603
        timeout=120,
    )
    proc = subprocess.run(
        [*manage, "demo"],
        env=env,
        capture_output=True,
        text=True,  # noqa: S603
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Demo finished: every job ended as expected." in proc.stdout
    assert "@task order_summary: SUCCESSFUL" in proc.stdout
