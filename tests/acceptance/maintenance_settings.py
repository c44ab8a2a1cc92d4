"""Settings of the worker of test_maintenance_off_claim_thread: pruning and the scheduler every
second, a day of finished jobs kept, and a per-second schedule that catches up on every tick."""

from tests.settings import *  # noqa: F403
from tests.settings import PGJOBS

PGJOBS = {
    **PGJOBS,
    "SCHEDULER_INTERVAL": 1.0,
    "PRUNE_INTERVAL": 1.0,
    "RETENTION": {"COMPLETED": 1, "COMPLETED_WITH_ERRORS": 1, "FAILED": 1, "CANCELLED": 1},
    "SCHEDULES": {  # fires into a queue nobody consumes: the fires are the work, not the jobs
        "catch-up": {
            "type": "test.noop",
            "cron": "* * * * * *",
            "timezone": "UTC",
            "queue": "fires",
            "catch_up": "all",
            "catch_up_window": 86400,
        },
    },
}
