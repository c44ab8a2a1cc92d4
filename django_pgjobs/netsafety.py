"""libpq options every worker connection gets: TCP keepalives, a user timeout and a connect
timeout on the client, and their twins on the server, set per session. A link that dies
silently then fails a call within ``detection_bound()`` seconds instead of hanging for the
kernel's two hours. What the user set in DATABASES OPTIONS always wins."""

from __future__ import annotations

import logging
import math
import os
import select
from typing import Any

import psycopg
from django.db import DatabaseError, connections
from psycopg.conninfo import conninfo_to_dict

from . import conf

logger = logging.getLogger("django_pgjobs.worker")

# Set on the server for the session, from the client's values (keyword -> server setting, unit).
# Only those the server knows are set (pg_settings), so an older server skips the newer ones.
# Not through a pooler (the backend is not the one the startup reported): the settings would
# stay on a server connection other clients share, whose peer is the pooler anyway.
_SERVER_SQL = (
    "SELECT count(set_config(v.name, v.value, false)) "
    "FROM unnest(%s::text[], %s::text[]) AS v(name, value) "
    "JOIN pg_settings s ON s.name = v.name WHERE pg_backend_pid() = %s"
)


def client_options() -> dict[str, int]:
    """The libpq keywords the settings ask for; a setting of 0 leaves libpq's default."""
    opts: dict[str, int] = {}
    if conf.get("CONNECT_TIMEOUT") and not os.environ.get("PGCONNECT_TIMEOUT"):  # libpq's own
        opts["connect_timeout"] = conf.get("CONNECT_TIMEOUT")
    keepalive = {
        "keepalives_idle": conf.get("TCP_KEEPALIVES_IDLE"),
        "keepalives_interval": conf.get("TCP_KEEPALIVES_INTERVAL"),
        "keepalives_count": conf.get("TCP_KEEPALIVES_COUNT"),
    }
    keepalive = {k: v for k, v in keepalive.items() if v}
    if keepalive:
        opts.update(keepalives=1, **keepalive)
    if conf.get("TCP_USER_TIMEOUT"):
        opts["tcp_user_timeout"] = max(1, round(conf.get("TCP_USER_TIMEOUT") * 1000))
    return opts


def with_client_options(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` (psycopg.connect keywords or DATABASES OPTIONS) with ours it does not set."""
    return {**client_options(), **params}


# alias -> (its OPTIONS dict, the keys we added to it): ours to update, the user's never.
_added: dict[str, tuple[dict[str, Any], set[str]]] = {}


def protect_alias(alias: str) -> None:
    """Give every connection this process opens on ``alias`` the client options: added to its
    DATABASES OPTIONS (the user's keys win; keys added by an earlier call follow the settings).
    An open connection of this thread made otherwise is closed, to be reopened with them. For
    runjobs, never for a caller's connection."""
    options = connections[alias].settings_dict.setdefault("OPTIONS", {})
    known, ours = _added.get(alias, (None, set()))
    if known is not options:
        ours = set()
    wanted = {k: v for k, v in client_options().items() if k not in options or k in ours}
    stale = ours - set(wanted)
    if all(options.get(k) == v for k, v in wanted.items()) and not stale:
        return
    for key in stale:
        del options[key]
    options.update(wanted)
    _added[alias] = (options, set(wanted))
    conn = connections[alias]
    if conn.connection is not None and not conn.in_atomic_block:
        conn.close()


def server_settings(params: dict[str, Any]) -> list[tuple[str, str]]:
    """(server setting, value) that mirror the effective client options of ``params``: the
    server then drops a session whose worker vanished (its keepalives, its user timeout), and
    stops a query whose client is gone (client_connection_check_interval)."""
    p = with_client_options(params)
    if str(p.get("keepalives", 1)) == "0":
        p = {k: v for k, v in p.items() if not k.startswith("keepalives")}
    pairs = [
        ("tcp_keepalives_idle", p.get("keepalives_idle")),
        ("tcp_keepalives_interval", p.get("keepalives_interval")),
        ("tcp_keepalives_count", p.get("keepalives_count")),
        ("tcp_user_timeout", p.get("tcp_user_timeout")),  # milliseconds, as libpq's
        (
            "client_connection_check_interval",
            _ms(p.get("keepalives_interval") or p.get("keepalives_idle")),
        ),
    ]
    return [(name, str(int(value))) for name, value in pairs if value]


def _ms(seconds: Any) -> int | None:
    return int(seconds) * 1000 if seconds else None


def set_server_side(cursor: Any, params: dict[str, Any], backend_pid: int) -> None:
    """Set the server-side twins for this session, in one statement, unless pooled (see
    _SERVER_SQL; PgBouncer's own tcp_* settings guard its links). Not as the startup `options`
    parameter, which costs no round trip but which PgBouncer refuses."""
    pairs = server_settings(params)
    if pairs:
        cursor.execute(_SERVER_SQL, [[n for n, _ in pairs], [v for _, v in pairs], backend_pid])


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Django's connection_created receiver of a worker: the server-side twins."""
    try:
        with connection.cursor() as cur:
            set_server_side(
                cur,
                connection.settings_dict.get("OPTIONS") or {},
                connection.connection.info.backend_pid,
            )
    except DatabaseError as exc:  # best effort: the client side still bounds every wait
        logger.warning(
            "could not set the session's TCP keepalives (%s)",
            exc,
            extra={"action": "worker.keepalives_not_set"},
        )


def close_dead(conns: Any) -> None:
    """Close the idle Django connections of ``conns`` whose socket has something to read: on
    an idle connection, the end the server sent, or the error a keepalive left (the server
    restarted, failed over, or the link died). The next query reconnects instead of failing."""
    for conn in conns:
        pg = conn.connection
        if pg is None or conn.in_atomic_block or pg.closed:
            continue
        try:
            readable = select.select([pg.fileno()], [], [], 0)[0]
        except (OSError, ValueError):
            readable = [True]  # unknown: treat as closed
        if readable:
            conn.close()


def connect(params: dict[str, Any], **kwargs: Any) -> psycopg.Connection:
    """psycopg.connect() with the client options, then the server-side twins (the listener's
    dedicated connection). ``kwargs``: psycopg.connect's own (autocommit=...)."""
    if "conninfo" in params:  # a DSN (LISTEN_DATABASE): its keys win over ours too
        params = {
            **conninfo_to_dict(params["conninfo"]),
            **{k: v for k, v in params.items() if k != "conninfo"},
        }
    params = with_client_options(params)
    conn = psycopg.connect(**params, **kwargs)
    try:
        with conn.cursor() as cur:
            set_server_side(cur, params, conn.info.backend_pid)
        if not conn.autocommit:
            conn.commit()
    except BaseException:
        conn.close()
        raise
    return conn


def detection_bound(options: dict[str, Any] | None = None) -> float:
    """Seconds a call on a dead link may block before it fails (inf: unbounded) with these
    connection options over ours: the largest of the user timeout (data sent, unacknowledged),
    the keepalives' idle + interval x count (waiting for a reply, or idle) and the connect
    timeout (per host)."""
    p = with_client_options(options or {})
    idle, interval, count, user, connect = (
        float(p.get(k) or 0)
        for k in (
            "keepalives_idle",
            "keepalives_interval",
            "keepalives_count",
            "tcp_user_timeout",
            "connect_timeout",
        )
    )
    keepalives = str(p.get("keepalives", 1)) != "0" and idle and interval and count
    waiting = idle + interval * count if keepalives else math.inf
    return max(user / 1000 if user else math.inf, waiting, connect or math.inf)
