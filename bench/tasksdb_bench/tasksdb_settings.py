"""Settings of the django-tasks-db peer: Django 6.1's django.tasks + django_tasks_db.DatabaseBackend,
configured as django-tasks-db's README shows."""

import os
from urllib.parse import unquote, urlsplit

_u = urlsplit(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench_tasksdb"))

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django_tasks_db", "benchtasks"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _u.path.lstrip("/"),
        "USER": unquote(_u.username or ""),
        "PASSWORD": unquote(_u.password or ""),
        "HOST": _u.hostname or "",
        "PORT": _u.port or "",
        # persistent connections (Django's default of 0 makes db_worker reconnect for
        # every task: close_old_connections() runs twice per loop)
        "CONN_MAX_AGE": 600,
    }
}
TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["default"],
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"handlers": [], "level": "WARNING"},
}
