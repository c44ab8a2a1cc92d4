"""Cursors for the SQL modules: plain, prepared (server-side binding), pipelined, and the
generic-plan switch of the worker's connection. The hot path: see docs/performance.md.
Behind a connection pooler (PgBouncer) nothing here keeps session state: see docs/topology.md."""

from __future__ import annotations

import logging
import time
from _thread import get_ident
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import DatabaseError, ProgrammingError, connections
from django.utils.asyncio import async_unsafe
from psycopg.postgres import types as pg_types
from psycopg.pq import Format

if TYPE_CHECKING:  # what Django's class is; its stubs say otherwise
    from psycopg import Cursor as ServerBindingCursor
else:
    from django.db.backends.postgresql.base import ServerBindingCursor

from . import conf
from .exceptions import NotMigrated
from .tables import JOB_TABLE

logger = logging.getLogger(__name__)


def require_tables(using: str | None = None) -> None:
    """NotMigrated unless the jobs table exists (one catalog lookup)."""
    alias = using or conf.get("DATABASE")
    with cursor(alias) as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [JOB_TABLE])
        if not cur.fetchone()[0]:
            raise NotMigrated(alias)


def raise_if_not_migrated(exc: Exception, using: str | None = None) -> None:
    """NotMigrated (run migrate) if ``exc`` is "relation pgjobs_... does not exist"."""
    if getattr(exc.__cause__, "sqlstate", None) == "42P01" and "pgjobs_" in str(exc):
        raise NotMigrated(using or conf.get("DATABASE")) from exc


@contextmanager
def tables_required(using: str | None = None) -> Iterator[None]:
    """Within it, "relation pgjobs_... does not exist" becomes NotMigrated (run migrate)."""
    try:
        yield
    except ProgrammingError as exc:
        raise_if_not_migrated(exc, using)
        raise


def cursor(using: str | None):
    """Django's own cursor on ``using`` (PGJOBS["DATABASE"] by default); a context manager."""
    return connections[using or conf.get("DATABASE")].cursor()


def database_now(using: str | None = None) -> datetime:
    """The database clock (schedules and retention never trust the worker's)."""
    with cursor(using) as cur:
        cur.execute("SELECT now()")
        return cur.fetchone()[0]


_TIMESTAMPTZ_OID = pg_types["timestamptz"].oid
PIPELINE = psycopg.Pipeline.is_supported()  # libpq >= 14 (psycopg[binary] bundles one)


class _PreparingCursor(ServerBindingCursor):
    """Binds parameters on the server and prepares each statement once per connection.

    Django turns psycopg's automatic preparation off (prepare_threshold None) and binds on the
    client, so the statement every enqueue runs would be parsed and planned each time. psycopg
    keeps the prepared names per connection (a reconnect starts
    afresh) and ``prepare=True`` asks for it, but only while a threshold is set.
    """

    alias = ""  # the Django alias, for _fall_back_if_pooler

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        conn = self.connection
        threshold = conn.prepare_threshold
        if threshold is None:
            conn.prepare_threshold = 5
        try:
            return super().execute(query, params, prepare=True, **kwargs)
        except psycopg.Error as exc:
            _fall_back_if_pooler(self.alias, exc)
            raise
        finally:
            conn.prepare_threshold = threshold


def prepares(conn: Any) -> bool:
    """Whether the Django connection ``conn`` runs our statements prepared: "auto" says no
    behind a pooler, declared (DISABLE_SERVER_SIDE_CURSORS) or found (pooled()); True says yes
    until a pooler refused one (_fall_back_if_pooler)."""
    setting = conf.get("PREPARED_STATEMENTS")
    if setting == "auto":
        return not conn.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS") and not pooled(conn)
    return bool(setting) and conn.alias not in _UNPREPARED


def pooled(conn: Any) -> bool:
    """Whether the Django connection ``conn`` reaches PostgreSQL through a proxy such as
    PgBouncer: the server's backend pid differs from the one the connection's startup reported
    (a pooler answers the startup itself, with a cancel key of its own). Asked once per
    connection (a round trip), the answer kept with it; False while its transaction is broken
    (Django then refuses the statement itself)."""
    if conn.connection is None:
        conn.ensure_connection()
    pg = conn.connection
    found = getattr(pg, "_pgjobs_pooled", None)
    if found is None:
        if conn.needs_rollback:
            return False
        with conn.wrap_database_errors:
            (pid,) = pg.execute("SELECT pg_backend_pid()").fetchone()
        found = pg._pgjobs_pooled = pid != pg.info.backend_pid
    return found


def tag_session(conn: Any, name: str) -> None:
    """Name the session in pg_stat_activity (application_name) and note whether ``conn`` is
    pooled, in one round trip. Not through a pooler: the name would stay on a server
    connection that other clients share."""
    pg = conn.connection
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_backend_pid() <> %s, CASE WHEN pg_backend_pid() = %s "
            "THEN set_config('application_name', %s, false) END",
            [pg.info.backend_pid, pg.info.backend_pid, name],
        )
        pg._pgjobs_pooled = cur.fetchone()[0]


# Aliases on which a pooler refused a prepared statement (PREPARED_STATEMENTS = True behind
# PgBouncer < 1.21 in transaction mode): this process goes on without prepared statements.
_UNPREPARED: set[str] = set()
_POOLER_SQLSTATES = {"26000", "42P05"}  # prepared statement does not exist / already exists


def _fall_back_if_pooler(alias: str, exc: BaseException | None) -> None:
    """After an error a pooler causes (our prepared statement missing, taken, or another
    client's under our name), stop preparing on ``alias`` for this process, and say how to
    configure it. The statement failed before it ran: the caller's retry loses nothing."""
    if not isinstance(exc, psycopg.Error) or alias in _UNPREPARED:
        return
    sqlstate = exc.sqlstate or ""
    if sqlstate not in _POOLER_SQLSTATES and not (
        sqlstate == "08P01" and "prepared statement" in str(exc)
    ):
        return
    _UNPREPARED.add(alias)
    logger.error(
        "a connection pooler refused a prepared statement on database %r (%s): going on "
        "without prepared statements. Behind PgBouncer in transaction mode set "
        "PGJOBS['PREPARED_STATEMENTS'] = 'auto' (or False) and DATABASES[%r]"
        "['DISABLE_SERVER_SIDE_CURSORS'] = True; see docs/topology.md",
        alias,
        " ".join(str(exc).split())[:200],
        alias,
        extra={"action": "db.unprepared"},
    )


@contextmanager
def pipeline(conn: Any) -> Iterator[None]:
    """A psycopg pipeline on the Django connection ``conn``, errors translated by Django
    (they come at the sync) and a pooler's refusal noted as in _PreparingCursor."""
    try:
        with conn.wrap_database_errors, conn.connection.pipeline():
            yield
    except DatabaseError as exc:
        _fall_back_if_pooler(conn.alias, exc.__cause__)
        raise


def _preparing_cursor(conn: Any, slot: int = 0) -> _PreparingCursor:
    """One of the Django connection's _PreparingCursors, after the checks Django makes before
    handing out a cursor (health check, connect, thread sharing). The cursors are kept open
    across calls (``slot``: n statements pipelined need n, made on first use); they hold
    nothing but the last statement's rows."""
    if conn.health_check_enabled and not conn.health_check_done:  # else it returns at once
        conn.close_if_health_check_failed()
    if conn.connection is None:  # all that ensure_connection() does once connected
        conn.ensure_connection()
    if conn._thread_ident != get_ident():  # else validate_thread_sharing() passes
        conn.validate_thread_sharing()
    pg = conn.connection
    cursors = getattr(conn, "_pgjobs_prepared", None)
    if not cursors or cursors[0].connection is not pg:  # first use, or reconnected
        cursors = conn._pgjobs_prepared = []  # kept per connection
    while len(cursors) <= slot:  # a pipeline of n statements with results needs n
        with conn.wrap_database_errors:
            cur = _PreparingCursor(pg)
            cur.alias = conn.alias
            client = conn.create_cursor()  # carries Django's time zone loader, if it set one
            loader = client.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
            client.close()
        if loader is not pg.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT):
            cur.adapters.register_loader(_TIMESTAMPTZ_OID, loader)
        cursors.append(cur)
    return cursors[slot]


@async_unsafe
def prepared_cursor(using: str | None, slot: int = 0) -> Any:
    """A Django cursor wrapper (its checks, error wrapping, query logging and
    execute_wrappers) around one of this connection's _PreparingCursors; Django's own cursor
    when PGJOBS["PREPARED_STATEMENTS"] says no. Not a context manager: the cursor stays with
    the connection."""
    conn = connections[using or conf.get("DATABASE")]
    if not prepares(conn):
        return conn.cursor()
    cur = _preparing_cursor(conn, slot)
    wrap = conn.make_debug_cursor if conn.queries_logged else conn.make_cursor
    return wrap(cur)  # type: ignore[arg-type]  # any DB-API cursor, whatever the stubs say


@async_unsafe
def fetchone_prepared(using: str | None, sql: str, params: Sequence[Any]) -> Any:
    """Run one statement as prepared_cursor() would and return its first row. When nothing
    watches the connection's queries (no DEBUG query log, no execute_wrappers), it skips
    Django's cursor wrapper but makes the same two calls the wrapper would (broken-transaction
    check, error translation): a quarter of a one-job enqueue's client CPU."""
    conn = connections[using or conf.get("DATABASE")]
    if conn.execute_wrappers or conn.queries_logged or not prepares(conn):
        cur = prepared_cursor(using, 0)
        cur.execute(sql, params)
        return cur.fetchone()
    cur = _preparing_cursor(conn)
    conn.validate_no_broken_transaction()
    with conn.wrap_database_errors:
        cur.execute(sql, params)
        return cur.fetchone()


# A generic plan is made from the table's statistics. From those of a (nearly) empty table it
# scans the table whole (the claim sorts every pending job, the UPDATE searches its ids) and
# keeps doing so as the table grows, until the statistics change: with autovacuum off, for the
# connection's life. Generic plans only once the statistics describe this many rows (well past
# where claim and finalize start walking the indexes; docs/performance.md); until then custom
# plans, made with the table's real size.
GENERIC_PLANS_MIN_ROWS = 10_000
GENERIC_PLANS_RECHECK = 10.0  # seconds between two looks at the statistics, until then


def use_generic_plans(using: str | None = None) -> None:
    """Plan the worker's prepared statements once per connection (plan_cache_mode
    force_generic_plan). PostgreSQL would otherwise re-plan the claim at every execution:
    a generic plan's estimate (it cannot know the LIMIT) never looks cheaper than a custom one,
    though both walk the same indexes (the statements are written so that they do: see
    queries._CLAIMED and queries._FINALIZE; tests/integration/test_guards.py checks the generic
    plans). Only for the worker's own connection, and only once the table's statistics
    describe GENERIC_PLANS_MIN_ROWS rows (see above)."""
    alias = using or conf.get("DATABASE")
    conn = connections[alias]
    if not prepares(conn) or pooled(conn):  # a session SET would stay on a shared connection
        return
    pg = conn.connection  # the flags live with it: a new connection decides again
    if getattr(pg, "_pgjobs_generic_plans", False):
        return
    now = time.monotonic()
    if now < getattr(pg, "_pgjobs_generic_recheck", 0.0):
        return
    pg._pgjobs_generic_recheck = now + GENERIC_PLANS_RECHECK
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT reltuples >= %s FROM pg_class WHERE oid = '{JOB_TABLE}'::regclass",
            [GENERIC_PLANS_MIN_ROWS],
        )
        if not cur.fetchone()[0]:
            return
        cur.execute("SET plan_cache_mode = force_generic_plan")
    pg._pgjobs_generic_plans = True


def generic_plans_on(using: str | None) -> bool:
    """Whether use_generic_plans() turned generic plans on for this connection (the table's
    statistics describe GENERIC_PLANS_MIN_ROWS rows)."""
    pg = connections[using or conf.get("DATABASE")].connection
    return bool(getattr(pg, "_pgjobs_generic_plans", False))


def server_side_binding(using: str | None) -> bool:
    """DATABASES[...]["OPTIONS"]["server_side_binding"]: Django's psycopg option."""
    options = connections[using or conf.get("DATABASE")].settings_dict.get("OPTIONS") or {}
    return bool(options.get("server_side_binding"))


def analyze_if_never_analyzed(table: str = JOB_TABLE, using: str | None = None) -> bool:
    """ANALYZE a table PostgreSQL has no statistics for yet (reltuples = -1).

    Right after ``migrate``, before autovacuum's first pass, the planner has no statistics and
    plans the claim as a bitmap scan plus a sort of every pending job. Workers call this once
    at start; it costs nothing once the table has statistics. Returns True when it ran ANALYZE.
    """
    if not table.replace("_", "").isalnum() or not table.isascii():
        raise ValueError(f"not a plain table name: {table!r}")
    with cursor(using) as cur:
        cur.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        row = cur.fetchone()
        if row is None or row[0] >= 0:
            return False
        cur.execute(f'ANALYZE "{table}"')  # a constant name; a non-owner gets a WARNING, no error
    return True


def listen_connection_params(alias: str) -> dict[str, Any]:
    """psycopg.connect() keyword arguments of the listener's own connection:
    PGJOBS["LISTEN_DATABASE"] (an alias of DATABASES, or a libpq connection string or URL:
    a direct connection when ``alias`` goes through a transaction pooler), or ``alias``'s."""
    target = conf.get("LISTEN_DATABASE")
    if target is not None and target not in connections.settings:
        return {"conninfo": target}
    params = connections[target or alias].get_connection_params()
    params.pop("cursor_factory", None)  # Django's; the listener uses plain psycopg
    params.pop("context", None)
    return params
