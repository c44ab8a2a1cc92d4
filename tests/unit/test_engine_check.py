"""pgjobs.E007 decides by the backend's vendor and driver, not by its ENGINE string: PostGIS and
wrappers of Django's postgresql backend are PostgreSQL (issue 26.2)."""

import pytest
from django.db import connections
from django.test import override_settings

from django_pgjobs import checks


def e007(monkeypatch, engine: str) -> list:
    monkeypatch.setitem(
        connections.settings, "other", {**connections.settings["default"], "ENGINE": engine}
    )
    with override_settings(PGJOBS={"DATABASE": "other"}):
        return [e for e in checks.check_settings() if e.id == "pgjobs.E007"]


def test_the_postgis_engine_is_postgresql(monkeypatch):
    try:
        from django.contrib.gis import geos  # noqa: F401 - loads libgeos_c
    except Exception as exc:  # noqa: BLE001 - ImproperlyConfigured or OSError from ctypes
        pytest.fail(
            f"GeoDjango's libraries do not load ({exc}): apt-get install libgeos-c1v5 "
            "libgdal32 (./dev test installs them when run as root)",
            pytrace=False,
        )
    assert e007(monkeypatch, "django.contrib.gis.db.backends.postgis") == []


def test_a_backend_wrapping_the_postgresql_one_is_postgresql(monkeypatch):
    assert e007(monkeypatch, "tests.support.wrapped_backend") == []


def test_sqlite_is_still_refused(monkeypatch):
    [error] = e007(monkeypatch, "django.db.backends.sqlite3")
    assert "django.db.backends.sqlite3 (vendor 'sqlite')" in error.msg


def test_a_postgresql_backend_on_another_driver_is_refused(monkeypatch):
    [error] = e007(monkeypatch, "tests.support.psycopg2_backend")
    assert "uses tests.support.psycopg2_backend (the driver psycopg2)" in error.msg


def test_a_backend_that_does_not_load_is_named(monkeypatch):
    [error] = e007(monkeypatch, "tests.support.no_such_backend")
    assert "which does not load" in error.msg and "no_such_backend" in error.msg
