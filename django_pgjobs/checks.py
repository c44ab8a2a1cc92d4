"""System checks (pgjobs.E001 …), documented in docs/settings.md."""

from __future__ import annotations

import math
from typing import Any

from django.core import checks

from . import conf

_POSITIVE = ("LEASE_SECONDS", "REAP_INTERVAL", "POLL_INTERVAL", "BACKOFF_BASE", "BACKOFF_MAX",
             "MAX_CONFIG_BYTES", "MAX_RESULT_BYTES", "MAX_ERROR_CHARS", "MAX_CONFIG_DEPTH")
_INT_AT_LEAST = {"MAX_ATTEMPTS": 1, "CONCURRENCY": 1, "BATCH_SIZE": 1, "PREFETCH": 0}


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.conf import settings

    errors: list[checks.CheckMessage] = []
    user = getattr(settings, "PGJOBS", {})
    if not isinstance(user, dict):
        return [checks.Error("PGJOBS must be a dict", hint="PGJOBS = {'MAX_ATTEMPTS': 5, …}",
                             id="pgjobs.E001")]
    unknown = sorted(set(user) - set(conf.DEFAULTS) - {"SCHEDULES", "RETENTION", "QUEUES"})
    if unknown:
        errors.append(checks.Error(
            f"unknown PGJOBS keys: {', '.join(unknown)}",
            hint=f"known keys: {', '.join(sorted(conf.DEFAULTS))}", id="pgjobs.E002"))
    s = conf.get_settings()
    for key in _POSITIVE:
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
            errors.append(checks.Error(f"PGJOBS['{key}'] must be a finite number > 0, got {v!r}",
                                       id="pgjobs.E003"))
    for key, low in _INT_AT_LEAST.items():
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            errors.append(checks.Error(f"PGJOBS['{key}'] must be an integer >= {low}, got {v!r}",
                                       id="pgjobs.E004"))
    t = s["TIMEOUT"]
    if t is not None and (not isinstance(t, int | float) or not 0 < t < math.inf):
        errors.append(checks.Error("PGJOBS['TIMEOUT'] must be None or seconds > 0",
                                   id="pgjobs.E005"))
    from django.db import connections

    alias = s["DATABASE"]
    if alias not in connections.settings:
        errors.append(checks.Error(f"PGJOBS['DATABASE'] = {alias!r} is not in DATABASES",
                                   id="pgjobs.E006"))
    elif connections.settings[alias]["ENGINE"] != "django.db.backends.postgresql":
        errors.append(checks.Error(
            f"django-pgjobs needs PostgreSQL; DATABASES[{alias!r}] uses "
            f"{connections.settings[alias]['ENGINE']}", id="pgjobs.E007"))
    j = s["BACKOFF_JITTER"]
    if isinstance(j, bool) or not isinstance(j, int | float) or not 0 <= j < 1:
        errors.append(checks.Error("PGJOBS['BACKOFF_JITTER'] must be in [0, 1)", id="pgjobs.E008"))
    channel = s["NOTIFY_CHANNEL"]
    if (not isinstance(channel, str) or "\x00" in channel
            or not 0 < len(channel.encode("utf-8", "surrogatepass")) <= 63):
        errors.append(checks.Error(
            f"PGJOBS['NOTIFY_CHANNEL'] must be a name of 1-63 bytes, got {channel!r}",
            hint="PostgreSQL's pg_notify() refuses longer names: every enqueue would fail",
            id="pgjobs.E009"))
    if s["PREPARED_STATEMENTS"] not in ("auto", True, False):
        errors.append(checks.Error(
            f"PGJOBS['PREPARED_STATEMENTS'] must be 'auto', True or False, got "
            f"{s['PREPARED_STATEMENTS']!r}", id="pgjobs.E010"))
    if isinstance(s["LEASE_SECONDS"], int | float) and isinstance(s["POLL_INTERVAL"], int | float):
        if s["LEASE_SECONDS"] < 3:
            errors.append(checks.Warning(
                "PGJOBS['LEASE_SECONDS'] under 3 s: a busy worker may lose leases between "
                "heartbeats (every LEASE_SECONDS/3)", id="pgjobs.W001"))
    return errors


# --- cron schedules, retention, maintenance intervals (pgjobs.E101 …) --------------------------

_SCHEDULE_CHECKS = {
    # Problem.kind -> (id, hint)
    "setting": ("pgjobs.E101", "PGJOBS['SCHEDULES'] = {'name': {'type': 'app.job', 'cron': "
                "'0 3 * * *', 'timezone': 'Europe/Paris', 'config': {}}}; allowed keys: type, "
                "cron, timezone, config, queue, priority, catch_up, catch_up_window"),
    "cron": ("pgjobs.E102", "use 5 fields (minute hour day-of-month month day-of-week, e.g. "
             "'*/15 * * * *'), an optional 6th field for seconds, or @hourly/@daily/@weekly/"
             "@monthly/@yearly; random 'R' values are not allowed"),
    "type": ("pgjobs.E103", "name a job type registered with @django_pgjobs.handler"),
    "timezone": ("pgjobs.E104", "use an IANA time zone name such as 'Europe/Paris' or 'UTC' "
                 "(install the tzdata package if the system has no zone database)"),
    "catch_up": ("pgjobs.E105", "catch_up is 'latest' (default), 'none' or 'all'; "
                 "catch_up_window is a number of seconds"),
    "option": ("pgjobs.E106", "queue, priority and config follow the rules of enqueue()"),
    "decorator": ("pgjobs.E107", "stack @schedule(...) on exactly one @handler, and give each "
                  "schedule a unique name (name=...)"),
}


@checks.register()
def check_schedules_and_retention(app_configs: Any = None, **kwargs: Any
                                  ) -> list[checks.CheckMessage]:
    from . import retention, scheduler

    errors: list[checks.CheckMessage] = []
    _, problems = scheduler.load()
    for p in problems:
        check_id, hint = _SCHEDULE_CHECKS[p.kind]
        errors.append(checks.Error(p.message, hint=hint, id=check_id))
    for message in retention.problems():
        errors.append(checks.Error(
            message, hint="PGJOBS['RETENTION'] = {'COMPLETED': 7, 'COMPLETED_WITH_ERRORS': 30, "
            "'FAILED': 30, 'CANCELLED': 7, 'SCHEDULE_FIRES': 30} (days; None keeps forever)",
            id="pgjobs.E108"))
    s = conf.get_settings()
    for key in ("SCHEDULER_INTERVAL", "PRUNE_INTERVAL"):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            errors.append(checks.Error(f"PGJOBS['{key}'] must be a number of seconds > 0, "
                                       f"got {v!r}", id="pgjobs.E109"))
    return errors
