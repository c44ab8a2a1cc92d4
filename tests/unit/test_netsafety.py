"""netsafety: the libpq options every worker connection gets, and their server-side twins."""

import math

from django_pgjobs import netsafety

OURS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10000,
}


def test_defaults_are_a_few_times_shorter_than_the_default_lease(settings, monkeypatch):
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    settings.PGJOBS = {}
    assert netsafety.client_options() == OURS
    assert netsafety.detection_bound() == 11  # keepalives: 5 + 2 x 3; lease: 30
    assert netsafety.server_settings({}) == [
        ("tcp_keepalives_idle", "5"),
        ("tcp_keepalives_interval", "2"),
        ("tcp_keepalives_count", "3"),
        ("tcp_user_timeout", "10000"),
        ("client_connection_check_interval", "2000"),
    ]


def test_what_the_user_set_wins_and_the_server_mirrors_it(settings, monkeypatch):
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    settings.PGJOBS = {}
    user = {"keepalives_idle": 60, "sslmode": "require"}
    assert netsafety.with_client_options(user) == {**OURS, **user}
    assert ("tcp_keepalives_idle", "60") in netsafety.server_settings(user)
    assert netsafety.detection_bound(user) == 66
    off = {"keepalives": 0}  # the user turned keepalives off: nothing of them on the server
    assert [n for n, _ in netsafety.server_settings(off)] == ["tcp_user_timeout"]
    assert netsafety.detection_bound(off) == math.inf


def test_zero_leaves_libpqs_default_and_pgconnect_timeout_is_respected(settings, monkeypatch):
    settings.PGJOBS = {
        "TCP_KEEPALIVES_IDLE": 0,
        "TCP_KEEPALIVES_INTERVAL": 0,
        "TCP_KEEPALIVES_COUNT": 0,
        "TCP_USER_TIMEOUT": 0.25,
    }
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    assert netsafety.client_options() == {"tcp_user_timeout": 250}
    assert netsafety.detection_bound() == math.inf
