"""System checks (pgjobs.E001 …), documented in docs/settings.md."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from . import conf

# Keys accepted but read by nothing (none today).
_RESERVED: set[str] = set()


def _table_checks(series: str) -> list[checks.CheckMessage]:
    """The errors and warnings of conf.SETTINGS' rules whose check id starts with `series`."""
    s, found = conf.get_settings(), list[checks.CheckMessage]()
    for entry in conf.SETTINGS:
        if not entry.check.startswith(series) or isinstance(entry.rule, conf.Special):
            continue
        value, where = s[entry.name], f"PGJOBS[{entry.name!r}]"
        if not entry.rule.accepts(value):
            hint = entry.hint or f"the default is {entry.default!r}"
            found.append(
                checks.Error(
                    f"{where} must be {entry.rule.what}, got {value!r}", hint=hint, id=entry.check
                )
            )
        elif entry.warn and (message := entry.warn.message(where, value)):
            found.append(checks.Warning(message, id=entry.warn.check))
    return found


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """PGJOBS itself (E001, E002), the rules of conf.SETTINGS (E0xx, W0xx, E3xx), the engine
    (E007)."""
    from django.conf import settings

    user = getattr(settings, "PGJOBS", {})
    if not isinstance(user, dict):
        return [
            checks.Error(
                "PGJOBS must be a dict", hint="PGJOBS = {'MAX_ATTEMPTS': 5, …}", id="pgjobs.E001"
            )
        ]
    errors: list[checks.CheckMessage] = []
    unknown = sorted(set(user) - set(conf.DEFAULTS) - _RESERVED)
    if unknown:
        errors.append(
            checks.Error(
                f"unknown PGJOBS keys: {', '.join(unknown)}",
                hint=f"known keys: {', '.join(sorted(conf.DEFAULTS))}",
                id="pgjobs.E002",
            )
        )
    errors += _table_checks("pgjobs.E0")
    errors += _table_checks("pgjobs.E3")  # a worker's connections (netsafety.py)
    alias = conf.get("DATABASE")
    if conf.BY_NAME["DATABASE"].rule.accepts(alias):  # else E006 above
        errors += _check_engine(alias)
        errors += _check_routing(alias)
    errors += _listen_through_pooler()
    return errors


def _check_engine(alias: str) -> list[checks.CheckMessage]:
    """E007: the alias is not PostgreSQL through psycopg 3. Decided by the backend's vendor, not
    its ENGINE string: PostGIS and wrappers of Django's postgresql backend are PostgreSQL."""
    from django.db import connections

    engine = connections.settings[alias]["ENGINE"]
    try:
        wrapper = connections.create_connection(alias)  # not cached, never connected
    except ImproperlyConfigured as exc:
        found = f"which does not load: {exc}"
    else:
        driver = getattr(getattr(wrapper, "Database", None), "__name__", "")
        if wrapper.vendor == "postgresql" and driver == "psycopg":
            return []
        found = (
            f"the driver {driver}"
            if wrapper.vendor == "postgresql"
            else f"vendor {wrapper.vendor!r}"
        )
    return [
        checks.Error(
            f"django-pgjobs needs PostgreSQL through psycopg 3; DATABASES[{alias!r}] uses {engine} "
            f"({found})",
            hint=f"set DATABASES[{alias!r}]['ENGINE'] = 'django.db.backends.postgresql' (or a "
            "backend built on it, such as django.contrib.gis.db.backends.postgis; with NAME, "
            "USER, PASSWORD, HOST and PORT of your PostgreSQL; pip install 'psycopg[binary]'), "
            "or PGJOBS['DATABASE'] to an alias that uses it",
            id="pgjobs.E007",
        )
    ]


def _check_routing(alias: str) -> list[checks.CheckMessage]:
    """W006: a queue database of its own that the routers do not send django_pgjobs to."""
    from django.db import DEFAULT_DB_ALIAS, router

    from .models import Job

    wrong = []
    if router.db_for_write(Job) != alias:
        wrong.append(f"writes go to {router.db_for_write(Job)!r}")
    if not router.allow_migrate_model(alias, Job):
        wrong.append(f"migrations may not create its tables on {alias!r}")
    if alias != DEFAULT_DB_ALIAS and router.allow_migrate_model(DEFAULT_DB_ALIAS, Job):
        wrong.append(f"migrate creates its tables on {DEFAULT_DB_ALIAS!r} too")
    if not wrong:
        return []
    return [
        checks.Warning(
            f"PGJOBS['DATABASE'] is {alias!r} but the database routers disagree: "
            + "; ".join(wrong),
            hint="add 'django_pgjobs.routers.QueueRouter' to DATABASE_ROUTERS and run "
            f"`manage.py migrate --database {alias}` (docs/queue-database.md)",
            id="pgjobs.W006",
        )
    ]


def _listen_through_pooler() -> list[checks.CheckMessage]:
    """W002: the listener's database declares a transaction pooler (Django's sign of one,
    DISABLE_SERVER_SIDE_CURSORS), where LISTEN never hears a NOTIFY. Workers then poll."""
    from django.db import connections

    s = conf.get_settings()
    listen_db = s["LISTEN_DATABASE"]
    alias = s["DATABASE"] if listen_db is None else listen_db
    if not isinstance(alias, str) or alias not in connections.settings:
        return []  # a DSN (its user's choice), or a bad value (E006, E015)
    if not connections.settings[alias].get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    setting = "PGJOBS['DATABASE']" if listen_db is None else "PGJOBS['LISTEN_DATABASE']"
    return [
        checks.Warning(
            "the worker's listener would wait for wakeups through a transaction pooler, where it "
            f"never hears one: {setting} is {alias!r}, whose DATABASES entry sets "
            "DISABLE_SERVER_SIDE_CURSORS; workers poll instead (PGJOBS['POLL_INTERVAL'])",
            hint="set PGJOBS['LISTEN_DATABASE'] to a direct connection to the same database: an "
            "alias of DATABASES without the pooler, or a libpq DSN (see docs/topology.md)",
            id="pgjobs.W002",
        )
    ]


# --- cron schedules, retention, maintenance intervals (pgjobs.E101 …) --------------------------

_SCHEDULE_CHECKS = {
    # Problem.kind -> (id, hint)
    "setting": (
        "pgjobs.E101",
        "PGJOBS['SCHEDULES'] = {'name': {'type': 'app.job', 'cron': "
        "'0 3 * * *', 'timezone': 'Europe/Paris', 'config': {}}}; allowed keys: type, "
        "cron, timezone, config, queue, priority, catch_up, catch_up_window",
    ),
    "cron": (
        "pgjobs.E102",
        "use 5 fields (minute hour day-of-month month day-of-week, e.g. "
        "'*/15 * * * *'), an optional 6th field for seconds, or @hourly/@daily/@weekly/"
        "@monthly/@yearly; random 'R' values are not allowed",
    ),
    "type": ("pgjobs.E103", "name a job type registered with @django_pgjobs.handler"),
    "timezone": (
        "pgjobs.E104",
        "use an IANA time zone name such as 'Europe/Paris' or 'UTC' "
        "(install the tzdata package if the system has no zone database)",
    ),
    "catch_up": (
        "pgjobs.E105",
        "catch_up is 'latest' (default), 'none' or 'all'; catch_up_window is a number of seconds",
    ),
    "option": ("pgjobs.E106", "queue, priority and config follow the rules of enqueue()"),
    "decorator": (
        "pgjobs.E107",
        "stack @schedule(...) on exactly one @handler, and give each "
        "schedule a unique name (name=...)",
    ),
}


@checks.register()
def check_schedules_and_retention(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    from . import retention, scheduler

    errors: list[checks.CheckMessage] = []
    _, problems = scheduler.load()
    for p in problems:
        check_id, hint = _SCHEDULE_CHECKS[p.kind]
        errors.append(checks.Error(p.message, hint=hint, id=check_id))
    for message in retention.problems():
        errors.append(
            checks.Error(
                message,
                hint="PGJOBS['RETENTION'] = {'COMPLETED': 7, 'COMPLETED_WITH_ERRORS': 30, "
                "'FAILED': 30, 'CANCELLED': 7, 'SCHEDULE_FIRES': 30} (days; None keeps forever)",
                id="pgjobs.E108",
            )
        )
    errors += _table_checks("pgjobs.E1")  # SCHEDULER_INTERVAL, PRUNE_INTERVAL (E109)
    return errors


_AGING_HINT = "PGJOBS['AGING'] = {'reports': {'every': 60, 'max': 10}} (seconds, a priority)"


@checks.register()
def check_aging(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """PGJOBS['AGING'] (E050-E053)."""
    from . import aging

    return [checks.Error(message, hint=_AGING_HINT, id=cid) for cid, message in aging.problems()]


@checks.register()
def check_tasks_backend(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """PgJobsBackend configured in TASKS where no Tasks framework is installed (Django 5.2
    without the backport): Django itself would say nothing, and @task would not exist."""
    from django.conf import settings

    from . import tasks_api

    tasks = getattr(settings, "TASKS", None)
    if tasks_api.AVAILABLE or not isinstance(tasks, dict):
        return []
    backend = "django_pgjobs.backend.PgJobsBackend"
    ours = [
        alias
        for alias, cfg in tasks.items()
        if isinstance(cfg, dict) and cfg.get("BACKEND") == backend
    ]
    if not ours:
        return []
    return [
        checks.Error(
            f"TASKS[{ours[0]!r}] uses django_pgjobs.backend.PgJobsBackend, but Django's Tasks "
            "framework is not installed",
            hint="on Django 5.2: pip install 'django-pgjobs[tasks]' (the django-tasks backport) and "
            "add 'django_tasks' to INSTALLED_APPS; Django 6.0 and later ship it",
            id="pgjobs.E014",
        )
    ]


@checks.register()
def check_flow_queues(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """PGJOBS["QUEUES"], the flow controls of queues (E040-E048, E054-E055, docs/flow-control.md)."""
    from . import flow

    declared = conf.get_settings().get("QUEUES")
    if declared is None:
        return []
    hint = 'PGJOBS["QUEUES"] = {"crm": {"concurrency": 20, "per_key": 1, "rate": "10/s", …}}'
    if not isinstance(declared, dict):
        return [checks.Error("PGJOBS['QUEUES'] must be a dict", hint=hint, id="pgjobs.E048")]
    errors: list[checks.CheckMessage] = []
    for name, value in declared.items():
        where = f"PGJOBS['QUEUES'][{name!r}]"
        if not conf.BY_NAME["DEFAULT_QUEUE"].rule.accepts(name) or not isinstance(value, dict):
            errors.append(
                checks.Error(
                    f"{where} must be a queue name with a dict", hint=hint, id="pgjobs.E048"
                )
            )
            continue
        try:
            flow.parse_queue(value)
        except ValueError as exc:
            errors.append(checks.Error(f"{where}: {exc.args[0]}", hint=hint, id=exc.args[1]))
    return errors
