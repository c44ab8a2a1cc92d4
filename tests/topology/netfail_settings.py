"""Settings of the partition and failover tests' workers: a short lease, and connection
settings bounding a dead link to a few seconds (the defaults are for a 30 s lease)."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, PGJOBS

PGJOBS = {
    **PGJOBS,
    "LEASE_SECONDS": 10.0,
    "CONNECT_TIMEOUT": 3,
    "TCP_KEEPALIVES_IDLE": 2,
    "TCP_KEEPALIVES_INTERVAL": 1,
    "TCP_KEEPALIVES_COUNT": 2,
    "TCP_USER_TIMEOUT": 3.0,
}

# The failover test: one primary and its standby, in a multi-host string libpq walks in order.
if os.environ.get("PGJOBS_TEST_HOSTS"):
    DATABASES["default"].update(
        HOST=os.environ["PGJOBS_TEST_HOSTS"], PORT=os.environ["PGJOBS_TEST_PORTS"]
    )
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "target_session_attrs": "read-write",
    }
