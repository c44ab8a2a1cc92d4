"""Run a management command in a subprocess against a chosen database (tests/settings.py)."""

import os
import subprocess
import sys

from tests.conftest import ROOT

DOWN = "postgres://postgres@127.0.0.1:1/nothing"  # nothing listens on port 1: refused at once


def manage(
    *args: str, db_name: str | None = None, url: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PGJOBS_TEST_DB_NAME", None)
    if db_name:
        env["PGJOBS_TEST_DB_NAME"] = db_name
    if url:
        env["DATABASE_URL"] = url
    return subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", *args, "--settings", "tests.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
