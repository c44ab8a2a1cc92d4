"""Settings of bench/topology.py's workers: the queue's database from BENCH_QUEUE_URL (direct,
or through PgBouncer with BENCH_POOLED=1), the direct one as the alias "direct", PGJOBS merged
from BENCH_PGJOBS (JSON)."""

import json
import os
from urllib.parse import unquote, urlsplit


def _db(url: str) -> dict:
    u = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": u.path.lstrip("/"),
        "USER": unquote(u.username or ""),
        "PASSWORD": unquote(u.password or ""),
        "HOST": u.hostname or "",
        "PORT": u.port or "",
        "CONN_MAX_AGE": 600,
    }


SECRET_KEY = "bench-only-not-secret"  # noqa: S105
USE_TZ = True
INSTALLED_APPS = ["django_pgjobs", "topoapp"]
DATABASES = {
    "default": _db(os.environ["BENCH_QUEUE_URL"]),
    "direct": _db(os.environ["BENCH_DIRECT_URL"]),
}
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = os.environ.get("BENCH_POOLED") == "1"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PGJOBS = json.loads(os.environ.get("BENCH_PGJOBS", "{}"))
