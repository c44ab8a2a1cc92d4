"""What a worker does behind a connection pooler (PgBouncer): find it at start, say what that
turns off, and decide whether the listener may LISTEN. The decisions: docs/topology.md."""

from __future__ import annotations

import logging

from django.db import DatabaseError, connections

from .. import conf, db

logger = logging.getLogger("django_pgjobs.worker")


def listens_through_pooler(using: str) -> bool:
    """True when the listener would LISTEN through a transaction pooler, where it can never
    hear a NOTIFY: PGJOBS["LISTEN_DATABASE"] unset and the queue's alias declares a
    transaction pooler (DISABLE_SERVER_SIDE_CURSORS) or is found behind one (db.pooled).
    A LISTEN_DATABASE that is set is the user's choice: a direct or session-mode connection."""
    if conf.get("LISTEN_DATABASE") is not None:
        return False
    conn = connections[using]
    if conn.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return True
    try:
        return db.pooled(conn)
    except DatabaseError:  # down: we cannot tell; the listener retries as usual
        return False


def check_at_start(using: str, *, listen: bool, poll_interval: float) -> bool:
    """Log what the pooler in front of ``using`` (if any) changes for this worker; returns
    whether to start the listener. With the database down it cannot tell: it listens unless a
    pooler is declared (the listener then reconnects as usual; prepares() asks again later)."""
    conn = connections[using]
    try:
        pooled = db.pooled(conn)
    except DatabaseError:
        pooled = False
    if pooled:
        prepared = conf.get("PREPARED_STATEMENTS")
        logger.info(
            "database %r is reached through a connection pooler: prepared statements %s, "
            "generic plans off, application_name left alone",
            using,
            "on (PREPARED_STATEMENTS = True)" if prepared is True else "off",
            extra={"action": "worker.pooled"},
        )
        if prepared is True:
            logger.warning(
                "PGJOBS['PREPARED_STATEMENTS'] = True through a connection pooler: only PgBouncer "
                ">= 1.21 with max_prepared_statements > 0 (or session mode) keeps them; else set "
                "it to 'auto'. A refused statement turns them off for this process",
                extra={"action": "worker.prepared_behind_pooler"},
            )
    if listen and listens_through_pooler(using):
        logger.warning(
            "LISTEN cannot work through a transaction pooler (database %r): polling every %ss "
            "instead. Set PGJOBS['LISTEN_DATABASE'] to a direct connection (an alias of "
            "DATABASES or a libpq DSN) for instant wakeups (pgjobs.W002)",
            using,
            poll_interval,
            extra={"action": "worker.listen_pooled"},
        )
        return False
    return listen
