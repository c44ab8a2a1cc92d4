"""tests.settings with PGJOBS taken from $PGJOBS_JSON (runjobs started with invalid settings)."""

import json
import os

from tests.settings import *  # noqa: F403

PGJOBS = json.loads(os.environ["PGJOBS_JSON"])
