"""tests.settings with the queue routed to the "queue" alias from the start (test_two_servers.py
runs test_queue_alias.py with it, QUEUE_DATABASE_URL naming a second server)."""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, PGJOBS

DATABASE_ROUTERS = ["django_pgjobs.routers.QueueRouter"]
PGJOBS = {**PGJOBS, "DATABASE": "queue"}
# Not the test database of the session that starts this one.
DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_routed"}
