"""WorkerOptions: what one runjobs process does, defaulting to the PGJOBS settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import conf

# A field that a setting defaults (conf.SETTINGS' `option`) takes its default from there.
_setting = conf.option_default


@dataclass
class WorkerOptions:
    queues: list[str] | None = None  # None: every queue
    concurrency: int = _setting("concurrency")
    async_concurrency: int = _setting("async_concurrency")  # coroutines on the event loop (aio.py)
    batch_size: int = _setting("batch_size")
    prefetch: int = _setting("prefetch")  # jobs held beyond one per thread while all are short
    burst: bool = False
    # With burst: seconds the database may stay unreachable before the worker gives up (exit 4).
    give_up_after: float = 60.0
    max_jobs: int | None = None
    poll_interval: float = _setting("poll_interval")
    shutdown_timeout: float = _setting("shutdown_timeout")
    worker_id: str | None = None
    lease_seconds: float = _setting("lease_seconds")
    reap_interval: float = _setting("reap_interval")
    listen: bool = True
    install_signal_handlers: bool = True
    # Observability (health.py): runjobs --health-port / --health-host.
    health_port: int | None = None
    health_host: str = "0.0.0.0"  # noqa: S104 - probes come from outside the pod
    fair_share: bool = _setting("fair_share")
    # Run claimed jobs on the thread that calls run_once(), no executor threads: the jobs see
    # that thread's transaction (testing.run_jobs() inside a TestCase). Timeouts are not enforced.
    inline: bool = False
    using: str = _setting("using")
    # Periodic maintenance of long-lived workers (not --burst): cron schedules, pruning.
    scheduler: bool = True
    scheduler_interval: float = _setting("scheduler_interval")
    prune: bool = True
    prune_interval: float = _setting("prune_interval")

    @classmethod
    def from_settings(cls, **overrides: Any) -> WorkerOptions:
        """The options of conf.SETTINGS' entries that name one, read from PGJOBS, then the
        overrides that are not None (runjobs' flags)."""
        base = cls(**{s.option: conf.get(s.name) for s in conf.SETTINGS if s.option})
        for key, value in overrides.items():
            if value is not None:
                setattr(base, key, value)
        return base
