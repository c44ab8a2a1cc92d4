"""Settings of the runjobs subprocesses of test_handler_outcomes: a global backoff long enough
that a job sent back to PENDING stays there until `--burst` ends (and shows which backoff)."""

from tests.settings import *  # noqa: F403
from tests.settings import PGJOBS

PGJOBS = {**PGJOBS, "BACKOFF_BASE": 600.0, "BACKOFF_MAX": 3600.0}
