"""The PGJOBS setting: one dict merged over defaults, read lazily, refreshed on setting_changed."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # Database alias holding the jobs table.
    "DATABASE": "default",
    # Queue used when neither enqueue() nor the handler names one.
    "DEFAULT_QUEUE": "default",
    # Retry policy defaults (a handler may override each one).
    "MAX_ATTEMPTS": 5,
    "BACKOFF_BASE": 5.0,  # seconds before the 2nd attempt; doubles each time
    "BACKOFF_MAX": 3600.0,  # cap, seconds
    "BACKOFF_JITTER": 0.1,  # +/- fraction of the delay
    # Per-handler wall-clock limit in seconds (None: no limit).
    "TIMEOUT": None,
    # Lease: a RUNNING job is owned for this long; the heartbeat renews it every LEASE/3.
    "LEASE_SECONDS": 30.0,
    # How often each worker looks for expired leases.
    "REAP_INTERVAL": 10.0,
    # Worker defaults (runjobs flags override them).
    "CONCURRENCY": 10,
    "BATCH_SIZE": 200,
    # Jobs a worker may hold, beyond one per thread, while every job it holds is of a type that
    # usually runs in under a millisecond: a claim then refills a queue the threads drain without
    # waiting for the next round trip. 0: never more claimed jobs than threads.
    "PREFETCH": 200,
    "POLL_INTERVAL": 1.0,
    "SHUTDOWN_TIMEOUT": 30.0,
    # Interleave tenants in each claim (round-robin over tenant_id), so that one tenant's
    # backlog cannot starve the others. Off by default: plain priority/FIFO order is cheaper.
    "FAIR_SHARE": False,
    # Days the dashboard's per-minute rollup and queue-depth samples are kept.
    "ROLLUP_RETENTION_DAYS": 30,
    # Bad-input limits, checked at enqueue.
    "MAX_CONFIG_BYTES": 1024 * 1024,
    "MAX_CONFIG_DEPTH": 64,
    # Truncation of what a handler produces.
    "MAX_RESULT_BYTES": 1024 * 1024,
    "MAX_ERROR_CHARS": 16 * 1024,
    # Modules imported in every installed app to find @handler and Django @task definitions.
    "AUTODISCOVER_MODULES": ["jobs", "tasks"],
    # Prepare enqueue's INSERT and the worker's finalize and claim on the server, once per
    # connection (psycopg's protocol-level prepared statements, whatever Django's
    # prepare_threshold; the worker also plans them once): "auto" does so unless the
    # database sets DISABLE_SERVER_SIDE_CURSORS, Django's sign of a transaction-mode pooler.
    # Set False behind a pooler that cannot hold prepared statements (PgBouncer < 1.21 in
    # transaction mode), True to force it.
    "PREPARED_STATEMENTS": "auto",
    # LISTEN/NOTIFY channel used for wakeups.
    "NOTIFY_CHANNEL": "pgjobs",
    # Keys whose values are hidden wherever django-pgjobs shows a config (case-insensitive,
    # substring match).
    "REDACT_KEYS": ["password", "passwd", "secret", "token", "authorization", "api_key", "apikey"],
    # --- cron schedules and retention (scheduler.py, retention.py) ---
    # {name: {"type", "cron", "timezone", "config", "queue", "priority", "catch_up",
    #  "catch_up_window"}}; see scheduler.py.
    "SCHEDULES": {},
    # Seconds between two scheduler passes of a worker (each pass is a couple of queries).
    "SCHEDULER_INTERVAL": 5.0,
    # Days a finished job is kept, per status (None: forever), merged over retention.DEFAULTS.
    "RETENTION": {},
    # Seconds between two pruning passes of a worker.
    "PRUNE_INTERVAL": 300.0,
}


@cache
def get_settings() -> dict[str, Any]:
    user = getattr(django_settings, "PGJOBS", {}) or {}
    merged = dict(DEFAULTS)
    merged.update(user)
    return merged


def get(name: str) -> Any:
    return get_settings()[name]


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "PGJOBS":
        get_settings.cache_clear()
