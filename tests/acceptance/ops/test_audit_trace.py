"""A `manage.py pgjobs_queue` run in a real process leaves its trace in the admin's log."""

from __future__ import annotations

import pytest

from tests.integration.admin.test_audit import logged


@pytest.mark.django_db(transaction=True)  # the subprocess commits; flushed afterwards
def test_pgjobs_queue_in_a_real_process_leaves_its_trace():
    import os
    import socket
    import subprocess
    import sys

    from django.db import connection

    from tests.conftest import ROOT

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PGJOBS_TEST_DB_NAME": connection.settings_dict["NAME"],
        "USER": "night-ops",
        "LOGNAME": "night-ops",
    }
    proc = subprocess.run(  # noqa: S603 - the action's flags sit after the subcommand
        [sys.executable, "-m", "django", "pgjobs_queue", "pause", "nightly-batch"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not recorded" not in proc.stderr
    assert logged("queue", "nightly-batch") == [
        (
            "pgjobs-command",
            "Paused (running jobs finish) (pgjobs_queue, OS user night-ops on "
            f"{socket.gethostname()})",
        )
    ]
