"""The package version, written once in django_pgjobs.__version__, shown where operators look:
`manage.py pgjobs_health` (JSON and text) and the admin dashboard (page and JSON twin)."""

from __future__ import annotations

import io
import json
import re

try:
    import tomllib
except ImportError:  # Python 3.10: tomli, the same parser (pytest depends on it there)
    import tomli as tomllib

import pytest
from django.core.management import call_command

import django_pgjobs
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db
VERSION = django_pgjobs.__version__
DASHBOARD = "/admin/django_pgjobs/dashboard/"


def health(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    # The dead-tuple rule reads what earlier tests left in pg_stat_user_tables: off here.
    call_command("pgjobs_health", "--min-dead-tuples", "2000000000", *args, stdout=out, stderr=err)
    return out.getvalue()


def test_the_version_is_a_pep440_release_string_read_by_pyproject():
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", VERSION), VERSION
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]  # one place only: __init__.py
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "django_pgjobs.__version__"
    }


def test_health_json_carries_the_version():
    doc = json.loads(health("--json"))
    assert doc["version"] == VERSION and doc["healthy"] is True


def test_health_text_starts_with_the_version():
    assert health().splitlines()[0] == f"django-pgjobs {VERSION}"


def test_dashboard_shows_the_version(admin_client):
    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<p id="pgjobs-version"' in html
    assert re.search(rf">django-pgjobs {re.escape(VERSION)}</p>", html), html[-2000:]
    assert admin_client.get(DASHBOARD + "json/").json()["version"] == VERSION
