"""Settings of the runjobs subprocesses of test_flow_control: two controlled queues."""

from tests.settings import *  # noqa: F403
from tests.settings import PGJOBS

FLOW_QUEUES = {
    "keyed": {"concurrency": 6, "per_key": 2, "key": "config.k"},
    "rated": {"rate": "20/s", "burst": 5},
    "solo": {"per_key": 1, "key": "config.k"},
}
PGJOBS = {**PGJOBS, "QUEUES": FLOW_QUEUES}
