"""Settings of the `runjobs` processes that tests/topology starts behind PgBouncer.

tests.settings, with `default` pointed at PgBouncer (PGJOBS_TEST_BOUNCER_URL, the test
database's name from PGJOBS_TEST_DB_NAME) and `direct` at the server itself. Also read from the
environment: PGJOBS_TEST_DISABLE_SSC=1 sets `DISABLE_SERVER_SIDE_CURSORS` on `default` (what
Django's docs ask for behind a transaction pooler), PGJOBS_TEST_PGJOBS (JSON) is merged over
PGJOBS.
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, PGJOBS, env

DATABASES["direct"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
DATABASES["default"] = {
    **env.db_url("PGJOBS_TEST_BOUNCER_URL"),
    "NAME": DATABASES["direct"]["NAME"],
    "DISABLE_SERVER_SIDE_CURSORS": os.environ.get("PGJOBS_TEST_DISABLE_SSC") == "1",
}
PGJOBS = {**PGJOBS, **json.loads(os.environ.get("PGJOBS_TEST_PGJOBS", "{}"))}
