"""Settings of the runjobs subprocesses of test_flow_fair_share: a queue shared 3:1."""

from tests.settings import *  # noqa: F403
from tests.settings import PGJOBS

FAIR_QUEUES = {"shared": {"key": "config.k", "fair": {"default": 1, "acme": 3}}}
PGJOBS = {**PGJOBS, "QUEUES": FAIR_QUEUES}
