"""runjobs --health-port in a real process: /readyz, /livez, /metrics answer while it runs."""

from __future__ import annotations

import signal

import pytest

from tests.conftest import eventually
from tests.integration.observability.test_health import free_port, get

pytestmark = pytest.mark.django_db(transaction=True)


def test_runjobs_health_port(start_worker):
    port = free_port()
    w = start_worker(
        "--health-port", str(port), "--health-host", "127.0.0.1", "--poll-interval", "0.2"
    )
    eventually(
        lambda: get(port, "/readyz")[0] == 200,
        timeout=30,
        message=f"/readyz answers 200 (worker log: {w.output()})",
    )
    assert get(port, "/livez")[0] == 200
    status, body = get(port, "/metrics")
    assert status in (200, 404)  # 404 says how to install the extra
    if status == 404:
        assert b"django-pgjobs[prometheus]" in body
    else:
        assert b"pgjobs_queue_depth" in body or b"pgjobs_stats_up" in body
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0
    assert get(port, "/livez")[0] == 0
