"""A dedicated LISTEN connection that wakes the claim loop as soon as a job is committed."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from .. import db, netsafety

logger = logging.getLogger("django_pgjobs.worker")


class Listener(threading.Thread):
    """Waits for NOTIFY on the wakeup channel; calls ``wake()`` for our queues.

    On connection loss it reconnects with capped, jittered backoff; meanwhile the loop polls.
    After every (re)connect it wakes the loop once, for notifications it may have missed.
    """

    def __init__(
        self, *, alias: str, channel: str, queues: list[str] | None, wake: Callable[[], None],
        application_name: str,
    ):
        super().__init__(name="pgjobs-listener", daemon=True)
        self.alias = alias
        self.channel = channel
        self.queues = set(queues) if queues is not None else None
        self.wake = wake
        self.application_name = application_name
        self.connected = threading.Event()
        self._stop_event = threading.Event()
        self._conn: psycopg.Connection | None = None

    def _connect(self) -> psycopg.Connection:
        params = db.listen_connection_params(self.alias)
        params["application_name"] = self.application_name
        conn = netsafety.connect(params, autocommit=True)
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    def run(self) -> None:
        delay = 0.5
        while not self._stop_event.is_set():
            try:
                self._conn = self._connect()
                self.connected.set()
                if delay > 0.5:
                    logger.info("listener reconnected", extra={"action": "worker.listener_up"})
                delay = 0.5
                self.wake()
                while not self._stop_event.is_set():
                    for note in self._conn.notifies(timeout=1.0):
                        if self.queues is None or note.payload in self.queues:
                            self.wake()
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop_event.is_set():
                    break
                logger.warning(
                    "listener connection lost (%s); polling until it is back, retry in %.1fs",
                    exc.__class__.__name__, delay, extra={"action": "worker.listener_down"},
                )
                self._stop_event.wait(delay * (0.5 + random.random()))  # noqa: S311
                delay = min(delay * 2, 30.0)
            finally:
                self._close()
        self.connected.clear()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001,S110
                pass

    def stop(self) -> None:
        self._stop_event.set()
