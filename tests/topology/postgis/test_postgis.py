"""A GeoDjango project on PostGIS (issue 26.2): the postgis engine passes the system checks,
migrates, enqueues in the same transaction as a spatial row, a real `runjobs --burst` runs the
job, and the admin's job list and dashboard answer. The PostGIS server is a throwaway cluster
of Debian's PostgreSQL 15 (postgresql-15-postgis-3), never the machine's running server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, missing_requirement

sys.path.insert(0, str(ROOT / "scripts"))
from pgserver import EmbeddedPostgres  # noqa: E402

DEBIAN_PG15 = Path("/usr/lib/postgresql/15")
POSTGIS = Path("/usr/share/postgresql/15/extension/postgis.control")
HOW = "apt-get install postgresql-15-postgis-3 libgdal32 libgeos-c1v5"


@pytest.fixture(scope="module")
def postgis_server():
    if not (DEBIAN_PG15 / "bin" / "initdb").is_file() or not POSTGIS.is_file():
        missing_requirement("PostGIS for Debian's PostgreSQL 15", HOW)
    pg = EmbeddedPostgres(install=DEBIAN_PG15, max_connections=40, handle_signals=False)
    pg.start()
    try:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION postgis")
        yield pg
    finally:
        pg.close()


def gis_env(pg: EmbeddedPostgres) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "POSTGIS_DATABASE_URL": pg.url}
    for key in ("DJANGO_SETTINGS_MODULE", "PGJOBS_TEST_DB_NAME", "DATABASE_URL"):
        env.pop(key, None)
    return env


def manage(pg: EmbeddedPostgres, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", *args, "--settings", "tests.topology.postgis.settings"],
        cwd=ROOT,
        env=gis_env(pg),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_postgis_project_passes_its_checks_and_migrates(postgis_server):
    checked = manage(postgis_server, "check", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    migrated = manage(postgis_server, "migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    with psycopg.connect(postgis_server.url, autocommit=True) as conn:
        kind = conn.execute(
            "SELECT type FROM geometry_columns WHERE f_table_name = "
            "'places_place' AND f_geometry_column = 'location'"
        ).fetchone()
        jobs = conn.execute("SELECT to_regclass('pgjobs_job') IS NOT NULL").fetchone()
    assert kind == ("POINT",) and jobs == (True,)


def test_the_postgis_project_enqueues_runs_and_shows_jobs(postgis_server):
    done = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/topology/postgis/flow.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "--ds",
            "tests.topology.postgis.settings",
        ],
        cwd=ROOT,
        env=gis_env(postgis_server),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) == 2 and "skipped" not in summary, summary
