"""A small shop that uses django-pgjobs. DATABASE_URL picks the PostgreSQL (./dev demo sets it)."""

import os

import environ

env = environ.Env()
if "DATABASE_URL" not in os.environ:
    raise SystemExit("DATABASE_URL is not set: run the demo with `./dev demo` from the repo root")

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="example-only-not-secret")
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {"default": env.db("DATABASE_URL")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgjobs",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_pgjobs.tracing.TraceMiddleware",  # jobs enqueued in a request carry its trace id
]
ROOT_URLCONF = "example.urls"
STATIC_URL = "static/"
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
PGJOBS = {
    "BACKOFF_BASE": 1.0,  # demo: retry after ~1 s, 2 s, 4 s …
    "BACKOFF_MAX": 10.0,
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"trace": {"()": "django_pgjobs.tracing.TraceIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)-7s %(message)s [trace=%(trace_id)s]"}
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["trace"]}
    },
    "loggers": {
        "django_pgjobs": {"handlers": ["console"], "level": "INFO"},
        "shop": {"handlers": ["console"], "level": "INFO"},
    },
}
# Django's Tasks framework on the same queue: @task functions run on runjobs. Django 6.x ships
# it as django.tasks; on Django 5.2 it is the django-tasks backport, an app of its own.
try:
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {
        "BACKEND": "django_pgjobs.backend.PgJobsBackend",
        "QUEUES": ["default", "emails", "imports"],
    }
}
