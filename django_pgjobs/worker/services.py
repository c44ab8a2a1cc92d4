"""Maintenance services and the thread that runs them, off the claim thread.

A service is one concern (reaper, scheduler, pruner, ...) with a name, an interval spread by
jitter, and ``run_once(now) -> counts``, which tests call directly. The runner gives each pass
the same error policy: a connection error closes the connection and retries that service with
a growing delay (one ErrorPolicy per service, policy.py, the claim loop's class too); any other
error is logged with its traceback and retried at its next interval.
A service with a ``lock_key`` runs its pass inside a transaction that first takes that advisory
lock, and is skipped while another worker holds it: one worker at a time does such work.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import InterfaceError, OperationalError, connections, transaction

from .policy import SERVICE_BACKOFF, ErrorPolicy

logger = logging.getLogger("django_pgjobs.worker")


class Service:
    name = ""
    interval = 60.0  # seconds between two passes of this worker
    jitter = 0.2  # each wait is interval * (1 +/- jitter): workers drift apart
    lock_key: int | None = None  # pg_try_advisory_xact_lock key: one worker at a time

    def __init__(self, using: str) -> None:
        self.using = using
        self.stopping = threading.Event()  # the runner's: set when the worker stops

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        """One pass; ``now`` replaces the database clock (tests). Returns what it did."""
        raise NotImplementedError

    def first_wait(self) -> float:
        """Seconds after the worker starts before the first pass."""
        return 0.0

    def next_wait(self) -> float:
        return self.interval * (1 + self.jitter * (2 * random.random() - 1))  # noqa: S311


def run_pass(service: Service, now: datetime | None = None) -> dict[str, int]:
    """``service.run_once(now)``, under its advisory lock if it has one."""
    if service.lock_key is None:
        return service.run_once(now)
    with transaction.atomic(using=service.using), connections[service.using].cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [service.lock_key])
        if not cur.fetchone()[0]:
            return {"skipped": 1}
        return service.run_once(now)


class ServiceRunner:
    """Runs services when due: on its own thread and connection, or inline (``run_due``)."""

    def __init__(self, services: Sequence[Service]) -> None:
        self.services = list(services)
        start = time.monotonic()
        self._due = {s.name: start + s.first_wait() for s in self.services}
        self._policy = {s.name: ErrorPolicy(s.using, SERVICE_BACKOFF) for s in self.services}
        self._stop = threading.Event()
        for service in self.services:  # a long pass can end early when the worker stops
            service.stopping = self._stop
        self._thread: threading.Thread | None = None
        self.last: dict[str, dict[str, int]] = {}  # each service's last counts

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pgjobs-services", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No pass starts after this; the one in progress ends by itself."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run_now(self, names: Iterable[str]) -> None:
        """Run these services once now (at start, before the first claim)."""
        for service in self.services:
            if service.name in names:
                self._run(service)

    def run_due(self, now: float) -> None:
        for service in self.services:
            if self._stop.is_set():
                return
            if now >= self._due[service.name]:
                self._run(service)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.run_due(time.monotonic())
                self._stop.wait(max(0.0, min(self._due.values()) - time.monotonic()))
        finally:
            connections.close_all()  # this thread's own connections

    def _run(self, service: Service) -> None:
        name, policy = service.name, self._policy[service.name]
        try:
            self.last[name] = run_pass(service)
            policy.recovered(time.monotonic())
            self._due[name] = time.monotonic() + service.next_wait()
        except (OperationalError, InterfaceError) as exc:
            now = time.monotonic()
            delay = policy.failed(now)
            self._due[name] = now + min(delay, service.interval)
            logger.warning(
                "maintenance service %s: database error (%s: %s); retrying in %.1fs",
                name,
                exc.__class__.__name__,
                " ".join(str(exc).split())[:300],
                delay,
                extra={"action": "worker.service_db_error"},
            )
            policy.close_connection()
        except Exception:
            self._due[name] = time.monotonic() + service.next_wait()
            logger.exception(
                "maintenance service %s failed; retried at its next interval",
                name,
                extra={"action": "worker.service_error"},
            )
