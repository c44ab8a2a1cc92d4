"""Handlers of the operator tests (issue 21): progress reports, a handler that ends its job
CANCELLED, a timeout to enforce. Registered by jobs.py's import at its end."""

import time

from django_pgjobs import Cancelled, handler

from .leases import steal_lease


@handler("test.progress", max_attempts=1)
def report_progress(job):
    """Reports ``n`` steps, ``pause`` seconds apart; with ``steal`` another worker takes the job
    over (a new lease token) before the first report."""
    if job.config.get("steal"):
        steal_lease(job.id)
    n = int(job.config["n"])
    pause = float(job.config.get("pause", 0.002))
    for i in range(1, n + 1):
        job.progress(i, n, note=f"item {i}")
        time.sleep(pause)
    return {"reported": n}


@handler("test.cancellable", max_attempts=3)
def stop_when_cancelled(job):
    """Waits up to ``seconds`` for a cancel request, then raises Cancelled."""
    deadline = time.monotonic() + float(job.config.get("seconds", 10))
    while time.monotonic() < deadline:
        if job.cancel_requested:
            raise Cancelled("stopped at the operator's request")
        time.sleep(0.05)
    return {"cancelled": False}


@handler("test.slow_timeout", timeout=1.5, max_attempts=1)
def overruns(job):
    """Runs past its 1.5 s timeout."""
    time.sleep(float(job.config.get("seconds", 30)))
