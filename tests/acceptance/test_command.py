"""runjobs flags: clear errors and exit 2, before touching the database."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def runjobs(*args):
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), DATABASE_URL="postgres://nobody@127.0.0.1:1/unreachable"
    )  # proves no DB access
    return subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "runjobs", "--settings", "tests.settings", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "expected an integer >= 1"),
        (["--concurrency", "many"], "expected an integer >= 1"),
        (["--batch-size", "-3"], "expected an integer >= 1"),
        (["--prefetch", "-1"], "expected an integer >= 0"),
        (["--queues", "bad queue"], "invalid queue name"),
        (["--queues", ","], "comma-separated"),
        (["--poll-interval", "0"], "seconds > 0"),
        (["--shutdown-timeout", "nan"], "seconds >= 0"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(args, message):
    proc = runjobs(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
