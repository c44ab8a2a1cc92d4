"""A dedicated LISTEN connection: wakes the claim loop, holds the doorbell while it sleeps.

The thread alone talks on its connection. It waits with select() on the connection's socket and
a wake pipe (the claim loop asks through the pipe to arm or disarm the doorbell, doorbell.py),
checks itself every CHECK_INTERVAL (its channel must still be listened to, answered within
CHECK_TIMEOUT) and rebuilds the connection when that fails; every wait is bounded. It speaks
libpq's asynchronous calls (psycopg.pq) so that no statement of its own can block it forever.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable
from enum import Enum

import psycopg
from psycopg import pq, sql

from .. import db, doorbell, netsafety

logger = logging.getLogger("django_pgjobs.worker")

CHECK_INTERVAL = 10.0  # seconds between self-checks of an idle connection
CHECK_TIMEOUT = 5.0  # seconds a statement of the listener may take before it counts as dead
GATE_RETRY = 0.001  # seconds before the doorbell's gate is tried again, doubling up to
GATE_RETRY_MAX = 0.05  # this while a producer's transaction stays open


class Armed(Enum):
    """What arm() found: the loop claims once more after FRESH or BUSY, then sleeps."""

    FRESH = "fresh"  # armed now, gate passed: claim once more, then sleep until rung
    STILL = "still"  # armed since an earlier gate: sleep until rung
    BUSY = "busy"  # armed, gate not passed in time (a producer's transaction is open)
    DOWN = "down"  # not connected: poll


class ListenerDead(psycopg.OperationalError):
    """The listener's connection did not answer in time or stopped listening."""


class Listener(threading.Thread):
    """Waits for NOTIFY on the wakeup channel; calls ``wake()`` for our queues.

    On connection loss it reconnects with capped, jittered backoff; meanwhile the loop polls.
    After every (re)connect it wakes the loop once, for notifications it may have missed.
    """

    def __init__(
        self,
        *,
        alias: str,
        channel: str,
        queues: list[str] | None,
        wake: Callable[[], None],
        application_name: str,
    ):
        super().__init__(name="pgjobs-listener", daemon=True)
        self.alias = alias
        self.channel = channel
        self.queues = set(queues) if queues is not None else None
        self._arm_sql = doorbell.arm_sql(channel, queues)  # S of our queues (or of all)
        self.wake = wake
        self.application_name = application_name
        self.connected = threading.Event()
        self.rebuilds = 0  # connections built after the first (tests, logs)
        self._stop_event = threading.Event()
        self._conn: psycopg.Connection | None = None
        self._pipe_r, self._pipe_w = os.pipe()
        os.set_blocking(self._pipe_w, False)
        self._pipe_closed = False
        self._cv = threading.Condition()
        self._want = False  # the claim loop wants the doorbell armed (it is about to sleep)
        self._gen = 0  # arm requests so far
        self._ready = -1  # the request whose gate passed while S stays held; -1: none
        self._rung = False  # a notification came while an arm request waits
        self._waiting = False  # arm() waits for the gate
        self._reported = -1  # the last request whose gate passing the loop has claimed after
        self._gate_delay = GATE_RETRY
        self._gen_tried = -1
        self._armed = False  # this connection holds S (listener thread only)
        self._encoding = "utf-8"  # the connection's, once connected

    # --- the claim loop's side ----------------------------------------------------------------

    def arm(self, timeout: float) -> Armed:
        """Hold the doorbell from now on; wait up to ``timeout`` for the gate (doorbell.py)."""
        with self._cv:
            if not self.connected.is_set():
                return Armed.DOWN
            if self._want and self._ready == self._gen:
                fresh, self._reported = self._reported != self._gen, self._gen
                return Armed.FRESH if fresh else Armed.STILL
            self._want, self._rung = True, False
            self._gen += 1
            self._poke()
            gen, self._waiting = self._gen, True
            self._cv.wait_for(
                lambda: self._ready == gen or self._rung or not self.connected.is_set(), timeout
            )
            self._waiting = False
            if self._ready == gen:
                self._reported = gen
                return Armed.FRESH
            return Armed.BUSY if self.connected.is_set() else Armed.DOWN

    def disarm(self) -> None:
        """Nothing to ring for (the loop has no free thread): release the doorbell."""
        with self._cv:
            if self._want:
                self._want, self._ready = False, -1
                self._poke()

    def stop(self) -> None:
        self._stop_event.set()
        with self._cv:
            self._poke()

    def _poke(self) -> None:
        """Wake the thread's select() (called holding self._cv)."""
        if self._pipe_closed:
            return
        try:
            os.write(self._pipe_w, b"x")
        except BlockingIOError:  # full: a wake-up is pending anyway
            pass

    # --- the thread ---------------------------------------------------------------------------

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
                if delay > 0.5 or self.rebuilds:
                    logger.info("listener reconnected", extra={"action": "worker.listener_up"})
                delay = 0.5
                self.wake()  # notifications sent while we were away are lost: claim now
                self._serve(self._conn)
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any error
                self._lost()
                if self._stop_event.is_set():
                    break
                logger.warning(
                    "listener connection lost (%s: %s); polling until it is back, retry in %.1fs",
                    exc.__class__.__name__,
                    " ".join(str(exc).split())[:200],
                    delay,
                    exc_info=not isinstance(exc, psycopg.Error),
                    extra={"action": "worker.listener_down"},
                )
                self.rebuilds += 1
                self._stop_event.wait(delay * (0.5 + random.random()))  # noqa: S311
                delay = min(delay * 2, 30.0)
            finally:
                self._close()
        self._lost()
        with self._cv:  # no _poke() may write to a closed (or reused) descriptor
            self._pipe_closed = True
            os.close(self._pipe_r)
            os.close(self._pipe_w)

    def _serve(self, conn: psycopg.Connection) -> None:
        """Until stopped: notifications, the loop's requests, self-checks."""
        pg = conn.pgconn
        self._encoding = conn.info.encoding
        next_check = time.monotonic() + CHECK_INTERVAL
        while not self._stop_event.is_set():
            retry = self._reconcile(pg)
            timeout = max(0.0, next_check - time.monotonic())
            if retry is not None:
                timeout = min(retry, timeout)
            readable, _, _ = select.select([pg.socket, self._pipe_r], [], [], timeout)
            if self._pipe_r in readable:
                os.read(self._pipe_r, 4096)
            if pg.socket in readable:
                pg.consume_input()
                self._dispatch(pg)
                if pg.status != pq.ConnStatus.OK:
                    raise ListenerDead("the server closed the LISTEN connection")
            if time.monotonic() >= next_check:
                self._check(pg)
                next_check = time.monotonic() + CHECK_INTERVAL

    def _reconcile(self, pg: pq.abc.PGconn) -> float | None:
        """Arm, pass the gate or disarm as the loop wants; seconds until the gate's next try."""
        with self._cv:
            want, gen, ready = self._want, self._gen, self._ready
        if not want:
            if self._armed:
                self._query(pg, doorbell.DISARM_SQL)
                self._armed = False
            return None
        if ready == gen:
            return None
        if self._gen_tried != gen:
            self._gen_tried, self._gate_delay = gen, GATE_RETRY
        if not self._armed:
            self._armed = self._query(pg, self._arm_sql) == b"t"
            if not self._armed and self.queues:  # some of our queues' S may be held: none
                self._query(pg, doorbell.DISARM_SQL)
        if not self._armed or self._query(pg, doorbell.gate_sql(self.channel)) != b"t":
            # S is being probed this very moment, or a producer's transaction holds G: retry
            delay, self._gate_delay = self._gate_delay, min(self._gate_delay * 2, GATE_RETRY_MAX)
            return delay
        with self._cv:
            if self._want and self._gen == gen:
                self._ready = gen
                if not self._waiting:  # arm() gave up waiting: the loop must claim after this
                    self._reported = gen
                    self.wake()
                self._cv.notify_all()
        return None

    def _dispatch(self, pg: pq.abc.PGconn) -> None:
        """Wake the loop for a notification of our queues; a rung sleeper is awake: disarm."""
        enc, woken = self._encoding, False
        while (note := pg.notifies()) is not None:
            if note.relname.decode(enc) != self.channel:
                continue
            if self.queues is None or note.extra.decode(enc) in self.queues:
                woken = True
        if woken:
            self.wake()
            with self._cv:
                self._rung = True
                if self._ready == self._gen:  # it was asleep: nothing to ring for until it sleeps
                    self._want, self._ready = False, -1
                self._cv.notify_all()

    def _check(self, pg: pq.abc.PGconn) -> None:
        """The connection answers, and still listens to our channel."""
        listening = self._query(
            pg,
            b"SELECT $1 = ANY(ARRAY(SELECT pg_listening_channels()))",
            self.channel.encode("utf-8"),
        )
        if listening != b"t":
            raise ListenerDead(f"the connection no longer listens to {self.channel!r}")

    def _query(self, pg: pq.abc.PGconn, query: str | bytes, *params: bytes) -> bytes | None:
        """One statement, answered within CHECK_TIMEOUT; the first column of its first row.
        Notifications that arrive meanwhile are dispatched."""
        pg.send_query_params(query.encode() if isinstance(query, str) else query, list(params))
        deadline = time.monotonic() + CHECK_TIMEOUT
        while pg.flush():
            self._wait_socket(pg, deadline, write=True)
        value, error = None, None
        while True:
            pg.consume_input()
            while not pg.is_busy():
                res = pg.get_result()
                if res is None:
                    self._dispatch(pg)
                    if error is not None:
                        raise psycopg.OperationalError(error)
                    return value
                if res.status == pq.ExecStatus.TUPLES_OK and res.ntuples and value is None:
                    value = res.get_value(0, 0)
                elif res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                    error = (res.error_message or b"").decode("utf-8", "replace")
            if pg.status != pq.ConnStatus.OK:
                raise ListenerDead("the server closed the LISTEN connection")
            self._wait_socket(pg, deadline)

    def _wait_socket(self, pg: pq.abc.PGconn, deadline: float, write: bool = False) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ListenerDead(f"no answer on the LISTEN connection within {CHECK_TIMEOUT}s")
        fds = [pg.socket]
        ready = select.select([] if write else fds, fds if write else [], [], left)
        if not (ready[0] or ready[1]):
            raise ListenerDead(f"no answer on the LISTEN connection within {CHECK_TIMEOUT}s")

    def _lost(self) -> None:
        """The connection is gone, and S with it: the loop polls until it is back."""
        self._armed = False
        with self._cv:
            self.connected.clear()
            self._ready = -1
            self._cv.notify_all()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001,S110
                pass
