"""Settings of the benchmark's django-pgjobs project: the package with its defaults, one
app (benchapp) whose jobs.py registers the no-op handler."""

import os
from urllib.parse import unquote, urlsplit

_u = urlsplit(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench_pgjobs"))

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django_pgjobs", "benchapp"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _u.path.lstrip("/"),
        "USER": unquote(_u.username or ""),
        "PASSWORD": unquote(_u.password or ""),
        "HOST": _u.hostname or "",
        "PORT": _u.port or "",
        "CONN_MAX_AGE": 600,  # same as the django-tasks-db peer
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# bench/scale.py's retention phase: pruning passes every few seconds instead of every 5 minutes
if os.environ.get("BENCH_PRUNE_INTERVAL"):
    PGJOBS = {"PRUNE_INTERVAL": float(os.environ["BENCH_PRUNE_INTERVAL"])}
