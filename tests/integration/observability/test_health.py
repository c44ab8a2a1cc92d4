"""runjobs --health-port: /livez, /readyz, /metrics from a small thread of the worker."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request

import pytest
from django.db import connections

from django_pgjobs import health
from django_pgjobs.worker import Worker, WorkerOptions
from tests.conftest import eventually

pytestmark = pytest.mark.django_db(transaction=True)


def get(port: int, route: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=5) as r:  # noqa: S310
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_in_process_worker_serves_live_and_ready_until_it_drains():
    worker = Worker(
        WorkerOptions(
            listen=False,
            install_signal_handlers=False,
            poll_interval=0.1,
            health_port=0,
            health_host="127.0.0.1",
        )
    )

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()  # the worker thread's own connection

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        eventually(lambda: worker.health_server is not None, message="health server started")
        port = worker.health_server.port
        status, body = get(port, "/readyz")
        assert status == 200, body
        assert json.loads(body) == {
            "status": "ok",
            "draining": False,
            "database": "ok",
            "migrations": "ok",
        }
        assert get(port, "/livez")[0] == 200
        assert get(port, "/nope")[0] == 404
        worker.state.stopping.set()  # draining: not ready any more (alive still)
        ok, body = health.readyz(worker)
        assert not ok and body["draining"] is True
    finally:
        worker.stop()
        thread.join(20)
    assert not thread.is_alive()
    assert get(port, "/livez")[0] == 0  # stopped with the worker


def test_livez_fails_when_the_loop_stops_stepping():
    worker = Worker(WorkerOptions(listen=False, install_signal_handlers=False))
    ok, _ = health.livez(worker)
    assert ok
    ok, body = health.livez(worker, now=worker.last_step_at + health.stuck_after(worker) + 1)
    assert not ok and body["status"] == "stuck"


def test_readyz_reports_an_unreachable_database(monkeypatch):
    worker = Worker(WorkerOptions(listen=False, install_signal_handlers=False))

    class Down:
        def cursor(self):
            from django.db import OperationalError

            raise OperationalError("connection refused")

        def close(self):
            pass

    monkeypatch.setattr(health, "connections", {"default": Down()})
    ok, body = health.readyz(worker)
    assert not ok and body["database"].startswith("unreachable")


def test_health_port_flag_is_validated():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="TCP port"):
        call_command("runjobs", "--health-port", "70000")
