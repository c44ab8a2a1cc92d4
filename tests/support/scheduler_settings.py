"""Settings of the runjobs subprocesses of test_scheduler_processes: a schedule every second."""

from tests.settings import *  # noqa: F403
from tests.settings import PGJOBS

PGJOBS = {
    **PGJOBS,
    "SCHEDULER_INTERVAL": 0.2,
    "SCHEDULES": {
        "every-second": {
            "type": "test.noop",
            "cron": "* * * * * *",
            "timezone": "UTC",
            "catch_up": "all",
            "catch_up_window": 60,
        },
    },
}
