"""A GeoDjango project: the PostGIS engine, django.contrib.gis and a spatial app beside
django_pgjobs (test_postgis.py points POSTGIS_DATABASE_URL at a PostGIS server of its own)."""

import os

import environ

DATABASES = {
    "default": environ.Env().db(
        "POSTGIS_DATABASE_URL", engine="django.contrib.gis.db.backends.postgis"
    )
}
if os.environ.get("PGJOBS_TEST_DB_NAME"):  # the runjobs subprocess joins the test database
    DATABASES["default"]["NAME"] = os.environ["PGJOBS_TEST_DB_NAME"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.gis",
    "django_pgjobs",
    "tests.topology.postgis.places",
]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
SECRET_KEY = "tests-only"  # noqa: S105
ROOT_URLCONF = "tests.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
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
# Django 6.1 warns that Debian 12's GDAL (3.6) cannot block file/network access from spatial
# references; this project reads none from outside.
SILENCED_SYSTEM_CHECKS = ["gis.W001"]
