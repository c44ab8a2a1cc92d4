"""Settings of a worker of another deployment: it registers the Django tasks of
tests/testapp/tasks.py but none of the handlers of tests/testapp/jobs.py."""

from tests.settings import *  # noqa: F403
from tests.settings import PGJOBS

PGJOBS = {**PGJOBS, "AUTODISCOVER_MODULES": ["tasks"]}
