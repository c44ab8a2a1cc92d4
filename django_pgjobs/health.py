"""Worker health endpoints (`runjobs --health-port P`), served by a small thread of the worker.

/livez    200 while the worker's main loop keeps stepping (503: stuck -> restart it)
/readyz   200 when the database answers, every migration is applied and the worker is not
          draining (503 otherwise, with the failing check in the JSON body)
/metrics  Prometheus text format when the [prometheus] extra is installed (404 otherwise)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from .sql.workers import ALIVE_LEASES
from .worker.run_state import EXIT_STUCK

logger = logging.getLogger("django_pgjobs.worker")


def stuck_after(worker: Any) -> float:
    """Seconds without a loop step after which /livez fails: when the worker's row stops
    counting alive (its heartbeat is a loop step), at least a minute."""
    o = worker.options
    return max(60.0, ALIVE_LEASES * o.lease_seconds, 5 * o.poll_interval)


def livez(worker: Any, now: float | None = None) -> tuple[bool, dict[str, Any]]:
    now = time.monotonic() if now is None else now
    since = now - getattr(worker, "last_step_at", now)
    ok = since < stuck_after(worker) and worker.exit_code != EXIT_STUCK
    body: dict[str, Any] = {
        "status": "ok" if ok else "stuck",
        "seconds_since_last_step": round(since, 1),
    }
    runtime = getattr(worker, "aio", None)
    if runtime is not None:  # the async handlers' event loop (aio.py): how late it runs
        body["event_loop"] = {
            "lag_seconds": round(runtime.watch.lag, 3),
            "max_lag_seconds": round(runtime.watch.max_lag, 3),
            "in_flight": runtime.active,
            "async_concurrency": runtime.limit,
            "abandoned": runtime.abandoned,
        }
    return ok, body


class _Migrations:
    applied = False  # once true, stays true for the life of the process


def migrations_applied(alias: str) -> bool:
    if not _Migrations.applied:
        executor = MigrationExecutor(connections[alias])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        _Migrations.applied = not plan
    return _Migrations.applied


def readyz(worker: Any) -> tuple[bool, dict[str, Any]]:
    checks: dict[str, Any] = {"draining": worker.state.is_stopping}
    alias = worker.using
    try:
        with connections[alias].cursor() as cur:
            cur.execute("SELECT 1")
        checks["database"] = "ok"
        checks["migrations"] = "ok" if migrations_applied(alias) else "unapplied"
    except DatabaseError as exc:
        checks["database"] = f"unreachable: {exc.__class__.__name__}"
    finally:
        connections[alias].close()  # this thread's own connection: never held between probes
    ok = (
        not checks["draining"]
        and checks.get("database") == "ok"
        and checks.get("migrations") == "ok"
    )
    return ok, {"status": "ok" if ok else "unready", **checks}


def metrics_text() -> bytes | None:
    try:
        from .contrib import prometheus
    except ImportError:
        return None
    if not prometheus.available():
        return None
    return prometheus.render()


def _install_metrics() -> None:
    try:
        from .contrib import prometheus
    except ImportError:
        return
    prometheus.install()


class HealthServer:
    def __init__(self, worker: Any, host: str, port: int):
        self.worker = worker
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                outer.handle(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # probes every few seconds would flood the worker's log

        _install_metrics()  # count this worker's runs from the start, not from the first scrape
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="pgjobs-health", daemon=True
        )

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> HealthServer:
        self.thread.start()
        logger.info(
            "health endpoints on %s:%s (/livez /readyz /metrics)",
            self.server.server_address[0],
            self.port,
            extra={"action": "worker.health_started"},
        )
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        route = request.path.split("?", 1)[0]
        if route == "/livez":
            self._json(request, *livez(self.worker))
        elif route == "/readyz":
            self._json(request, *readyz(self.worker))
        elif route == "/metrics":
            body = metrics_text()
            if body is None:
                self._send(
                    request,
                    404,
                    b"prometheus_client is not installed: "
                    b"pip install 'django-pgjobs[prometheus]'\n",
                    "text/plain",
                )
            else:
                self._send(request, 200, body, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(request, 404, b"not found: /livez /readyz /metrics\n", "text/plain")

    def _json(self, request: BaseHTTPRequestHandler, ok: bool, body: dict[str, Any]) -> None:
        self._send(request, 200 if ok else 503, json.dumps(body).encode(), "application/json")

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str) -> None:
        request.send_response(code)
        request.send_header("Content-Type", ctype)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
