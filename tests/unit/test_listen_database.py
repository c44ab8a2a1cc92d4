"""PGJOBS["LISTEN_DATABASE"] (E015), the W002 warning, and where the listener connects."""

import pytest
from django.core import checks

from django_pgjobs import db


def pgjobs_ids() -> list[str]:
    return [m.id for m in checks.run_checks() if m.id and m.id.startswith("pgjobs.")]


@pytest.mark.parametrize(
    "value", [None, "default", "host=db.internal dbname=app", "postgresql://u@db:5432/app"]
)
def test_an_alias_a_dsn_or_none_is_accepted(settings, value):
    settings.PGJOBS = {"LISTEN_DATABASE": value}
    assert pgjobs_ids() == []


@pytest.mark.parametrize("value", ["nosuchalias", 5, "", "host=x\x00"])
def test_anything_else_is_refused_as_e015(settings, value):
    settings.PGJOBS = {"LISTEN_DATABASE": value}
    assert pgjobs_ids() == ["pgjobs.E015"]


def test_listening_through_a_declared_transaction_pooler_warns_w002(settings):
    from django.db import connections

    entry = connections.settings["server_binding"]
    entry["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        settings.PGJOBS = {"DATABASE": "server_binding"}
        (warning,) = [m for m in checks.run_checks() if m.id == "pgjobs.W002"]
        assert "PGJOBS['DATABASE'] is 'server_binding'" in warning.msg
        assert "LISTEN_DATABASE" in warning.hint
        settings.PGJOBS = {"DATABASE": "server_binding", "LISTEN_DATABASE": "default"}
        # A direct connection for the listener: no W002 (W006 says this alias is unrouted).
        assert "pgjobs.W002" not in pgjobs_ids()
        settings.PGJOBS = {"LISTEN_DATABASE": "server_binding"}
        assert pgjobs_ids() == ["pgjobs.W002"]  # named explicitly, still a pooler
    finally:
        del entry["DISABLE_SERVER_SIDE_CURSORS"]


def test_the_listener_connects_where_the_setting_says(settings):
    settings.PGJOBS = {}
    params = db.listen_connection_params("default")
    assert params["dbname"] and "cursor_factory" not in params and "context" not in params
    settings.PGJOBS = {"LISTEN_DATABASE": "host=db.internal port=5433 dbname=app"}
    assert db.listen_connection_params("default") == {
        "conninfo": "host=db.internal port=5433 dbname=app"
    }
    settings.PGJOBS = {"LISTEN_DATABASE": "server_binding"}
    assert db.listen_connection_params("default")["dbname"] == params["dbname"]
