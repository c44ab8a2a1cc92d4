"""Test settings: a real PostgreSQL from DATABASE_URL (./dev test sets one up when it is unset)."""

import os

import environ

env = environ.Env()
if "DATABASE_URL" not in os.environ:
    raise SystemExit(
        "DATABASE_URL is not set. Run the suite with `./dev test` (it starts a throwaway "
        "PostgreSQL when DATABASE_URL is unset), or export DATABASE_URL=postgres://user@host/db"
    )
DATABASES = {"default": env.db("DATABASE_URL")}
# Worker subprocesses started by the tests connect to the test database by this name.
if os.environ.get("PGJOBS_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["PGJOBS_TEST_DB_NAME"]
DATABASES["default"].setdefault("TEST", {})
# The same database through Django's server-side binding (prepared statements), for the tests
# that check the worker's SQL works there too.
DATABASES["server_binding"] = {
    **DATABASES["default"],
    "OPTIONS": {**DATABASES["default"].get("OPTIONS", {}), "server_side_binding": True},
    "TEST": {"MIRROR": "default"},
}
# A second database for the queue (tests/acceptance/test_queue_alias.py,
# tests/topology/test_two_servers.py): on the same server by default, on another one
# when QUEUE_DATABASE_URL is set. Only tests that ask for it (databases=[..., "queue"]) create it.
if os.environ.get("QUEUE_DATABASE_URL"):
    DATABASES["queue"] = env.db("QUEUE_DATABASE_URL")
else:
    DATABASES["queue"] = {**DATABASES["default"], "NAME": DATABASES["default"]["NAME"] + "_queue"}
DATABASES["queue"]["TEST"] = {}
if os.environ.get("PGJOBS_TEST_QUEUE_DB_NAME"):  # worker subprocesses, as PGJOBS_TEST_DB_NAME
    DATABASES["queue"]["NAME"] = os.environ["PGJOBS_TEST_QUEUE_DB_NAME"]

SECRET_KEY = "tests-only"  # noqa: S105
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_pgjobs",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_pgjobs.tracing.TraceMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PGJOBS = {
    "BACKOFF_BASE": 0.05,
    "BACKOFF_MAX": 0.2,
    "LEASE_SECONDS": 30.0,
}
# Django Tasks (tests/integration/tasks): django-pgjobs is the default backend; the built-in ones are here
# so that tests can compare Django's own validation with ours.
# Django 6.x ships the Tasks framework as django.tasks; on 5.2 it is the django-tasks backport.
try:
    import django.tasks  # noqa: F401

    TASKS_MODULE = "django.tasks"
except ImportError:
    TASKS_MODULE = "django_tasks"
    INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {"BACKEND": "django_pgjobs.backend.PgJobsBackend", "QUEUES": ["default", "emails"]},
    "dummy": {
        "BACKEND": f"{TASKS_MODULE}.backends.dummy.DummyBackend",
        "QUEUES": ["default", "emails"],
    },
    "immediate": {
        "BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend",
        "QUEUES": ["default", "emails"],
    },
}
