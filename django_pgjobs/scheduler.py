"""Cron schedules: declared in settings or by decorator, fired by every worker, once per tick.

    PGJOBS["SCHEDULES"] = {
        "nightly-cleanup": {"type": "shop.cleanup", "cron": "0 3 * * *",
                            "timezone": "Europe/Paris", "config": {"days": 30}},
    }

    @schedule("*/15 * * * *")          # stacked on a @handler; the schedule is named after the type
    @handler("shop.sync_stock")
    def sync_stock(job): ...

Each worker runs :func:`enqueue_due` every ``PGJOBS["SCHEDULER_INTERVAL"]`` seconds. A fire is
one transaction: INSERT the (schedule, fire time) row ON CONFLICT DO NOTHING, and only the
statement that inserted it enqueues the job (through ``enqueue()``, so validation and NOTIFY
apply). The unique constraint makes each tick fire once however many workers race for it: no
leader election.

The ``pgjobs_schedule`` row of a schedule holds its runtime state. ``next_fire_time`` is the
cursor: the first tick not yet handled. NULL means "start counting from now" (a new schedule,
one just re-enabled or redefined): a tick that passed before the schedule existed never fires.
Ticks that passed while no worker ran follow the schedule's ``catch_up`` policy:

    "latest" (default)  fire once, for the most recent missed tick (if ``catch_up_window`` is
                        set: only when that tick is at most this many seconds late)
    "none"              fire a tick only if it is at most ``catch_up_window`` s late (default 60)
    "all"               fire every missed tick at most ``catch_up_window`` s old (default 1 day),
                        oldest first, at most 1,000 per pass

Times come from the database clock (``SELECT now()``), or from ``now=`` in tests.
"""

from __future__ import annotations

import logging
import zoneinfo
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as _timezone
from typing import Any

from croniter import croniter
from django.db import InterfaceError, OperationalError, transaction

from . import conf, db, registry
from .sql import schedules as sql

UTC = _timezone.utc  # datetime.UTC is Python >= 3.11

logger = logging.getLogger("django_pgjobs.scheduler")

CATCH_UP_POLICIES = ("latest", "none", "all")
DEFAULT_WINDOW = {"latest": None, "none": 60.0, "all": 86400.0}
MAX_FIRES_PER_PASS = 1000
_KEYS = {"type", "cron", "timezone", "config", "queue", "priority", "catch_up", "catch_up_window"}
_EPSILON = timedelta(microseconds=1)


# --- definitions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleSpec:
    """One valid schedule definition. Build it with :func:`load` (which validates)."""

    name: str
    type: str
    cron: str
    timezone: str
    config: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    catch_up: str = "latest"
    catch_up_window: float | None = None

    @property
    def window(self) -> timedelta | None:
        seconds = self.catch_up_window
        if seconds is None:
            seconds = DEFAULT_WINDOW[self.catch_up]
        return None if seconds is None else timedelta(seconds=seconds)

    # Tick arithmetic. Ticks are computed in the schedule's time zone and returned in UTC.
    # A fixed wall-clock time that occurs twice when DST ends fires once (like Vixie cron);
    # a time skipped when DST starts fires just after the change (croniter's behaviour).

    def _iter(self, start: datetime) -> croniter:
        tz = zoneinfo.ZoneInfo(self.timezone)
        return croniter(self.cron, start.astimezone(tz), ret_type=datetime, hash_id=self.name)

    def _repeated(self, t: datetime) -> bool:
        return bool(t.fold) and not _wildcard_hour(self.cron)

    def next_after(self, t: datetime) -> datetime:
        """The first tick strictly after ``t``."""
        it = self._iter(t)
        while True:
            tick = it.get_next()
            if not self._repeated(tick):
                return tick.astimezone(UTC)

    def latest_at_or_before(self, t: datetime) -> datetime:
        it = self._iter(t + _EPSILON)
        while True:
            tick = it.get_prev()
            if not self._repeated(tick):
                return tick.astimezone(UTC)

    def is_tick(self, t: datetime) -> bool:
        return self.next_after(t - _EPSILON) == t

    def ticks_between(self, first: datetime, last: datetime, limit: int) -> Iterator[datetime]:
        """Ticks in [first, last], oldest first, at most ``limit``."""
        t = first - _EPSILON
        for _ in range(limit):
            t = self.next_after(t)
            if t > last:
                return
            yield t


def _wildcard_hour(cron: str) -> bool:
    fields = cron.split()
    return len(fields) >= 2 and fields[1].startswith("*")


# Schedules declared with @schedule: resolved to their job type when read, so the decorator
# works above or below @handler.
_decorated: list[tuple[Callable[..., Any], dict[str, Any]]] = []


def schedule(
    cron: str,
    *,
    name: str | None = None,
    timezone: str | None = None,
    config: Mapping[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    catch_up: str = "latest",
    catch_up_window: float | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run a ``@handler`` on a cron schedule. Problems are reported by ``manage.py check``."""

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        _decorated.append(
            (
                func,
                {
                    "name": name,
                    "cron": cron,
                    "timezone": timezone,
                    "config": config or {},
                    "queue": queue,
                    "priority": priority,
                    "catch_up": catch_up,
                    "catch_up_window": catch_up_window,
                },
            )
        )
        return func

    return decorator


@dataclass(frozen=True)
class Problem:
    """A definition that cannot run. ``kind`` selects the check id (see checks.py)."""

    kind: str  # "setting" | "cron" | "type" | "timezone" | "catch_up" | "option" | "decorator"
    name: str
    message: str


def load() -> tuple[list[ScheduleSpec], list[Problem]]:
    """Every schedule definition: the valid ones, and what is wrong with the others."""
    specs: list[ScheduleSpec] = []
    problems: list[Problem] = []
    raw = conf.get("SCHEDULES")
    if not isinstance(raw, Mapping):
        problems.append(
            Problem(
                "setting",
                "SCHEDULES",
                f"PGJOBS['SCHEDULES'] must be a dict, got {type(raw).__name__}",
            )
        )
        raw = {}
    entries: list[tuple[str, str, Mapping[str, Any]]] = []
    for name, entry in raw.items():
        if not isinstance(entry, Mapping):
            got = type(entry).__name__
            problems.append(
                Problem("setting", str(name), f"schedule {name!r} must be a dict, got {got}")
            )
            continue
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            problems.append(
                Problem(
                    "setting",
                    str(name),
                    f"schedule {name!r} has unknown keys: {', '.join(unknown)}",
                )
            )
        entries.append((str(name), "PGJOBS['SCHEDULES']", entry))
    for func, options in _decorated:
        types = [
            s.type
            for s in map(registry.get, registry.registered_types())
            if s is not None and s.func is func
        ]
        where = f"@schedule on {func.__module__}.{func.__qualname__}"
        if len(types) != 1:
            problems.append(
                Problem(
                    "decorator",
                    options["name"] or func.__qualname__,
                    f"{where}: the function is registered as {len(types)} job "
                    "types; it must be exactly one @handler",
                )
            )
            continue
        entries.append((options["name"] or types[0], where, {**options, "type": types[0]}))
    seen: dict[str, str] = {}
    for name, where, entry in entries:
        if name in seen:
            problems.append(
                Problem(
                    "decorator",
                    name,
                    f"schedule {name!r} is defined twice: by {seen[name]} and by {where}",
                )
            )
            continue
        seen[name] = where
        spec, found = _build(name, entry)
        problems.extend(found)
        if spec is not None:
            specs.append(spec)
    return specs, problems


def _build(name: str, e: Mapping[str, Any]) -> tuple[ScheduleSpec | None, list[Problem]]:
    from django.conf import settings

    from .exceptions import EnqueueError
    from .validation import check_priority, check_queue, encode_config

    problems: list[Problem] = []

    def bad(kind: str, message: str) -> None:
        problems.append(Problem(kind, name, f"schedule {name!r}: {message}"))

    if not name or len(name) > 255:
        bad("setting", "the name must be 1-255 characters")
    cron = e.get("cron")
    if not isinstance(cron, str) or not _valid_cron(cron):
        bad("cron", f"invalid cron expression {cron!r}")
    job_type = e.get("type")
    if job_type is None:
        bad("type", "no 'type': name the job type it enqueues (a @handler's type)")
    elif not isinstance(job_type, str) or registry.get(job_type) is None:
        bad("type", f"unknown job type {job_type!r}")
    tz = e.get("timezone") or getattr(settings, "TIME_ZONE", None) or "UTC"
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        bad("timezone", f"unknown time zone {tz!r}")
    catch_up = e.get("catch_up", "latest")
    window = e.get("catch_up_window")
    if catch_up not in CATCH_UP_POLICIES:
        bad("catch_up", f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, got {catch_up!r}")
    if window is not None and (
        isinstance(window, bool)
        or not isinstance(window, int | float)
        or not 0 < window <= 366 * 86400
    ):
        bad("catch_up", f"catch_up_window must be seconds in (0, 1 year], got {window!r}")
    try:
        if e.get("queue") is not None:
            check_queue(e["queue"])
        if e.get("priority") is not None:
            check_priority(e["priority"])
        encode_config(
            e.get("config") or {},
            max_bytes=conf.get("MAX_CONFIG_BYTES"),
            max_depth=conf.get("MAX_CONFIG_DEPTH"),
        )
    except EnqueueError as exc:
        bad("option", str(exc))
    if problems:
        return None, problems
    assert isinstance(job_type, str) and isinstance(cron, str)  # else a problem above
    return ScheduleSpec(
        name=name,
        type=job_type,
        cron=cron,
        timezone=tz,
        config=dict(e.get("config") or {}),
        queue=e.get("queue"),
        priority=e.get("priority"),
        catch_up=catch_up,
        catch_up_window=window,
    ), []


def _valid_cron(cron: str) -> bool:
    fields = cron.split()
    if not (len(fields) in (5, 6) or (len(fields) == 1 and cron.startswith("@"))):
        return False  # standard 5 fields, an optional 6th for seconds, or @daily & co.
    if any("R" in f for f in fields):
        return False  # croniter's random values would differ from one worker to the next
    return bool(croniter.is_valid(cron))


_reported: set[str] = set()  # problems already logged by this process


def valid_schedules() -> dict[str, ScheduleSpec]:
    specs, problems = load()
    for p in problems:
        if p.message in _reported:
            continue
        _reported.add(p.message)
        logger.error(
            "schedule.invalid %s: %s (run manage.py check)",
            p.name,
            p.message,
            extra={"action": "schedule.invalid", "schedule": p.name},
        )
    return {s.name: s for s in specs}


# --- the scheduler pass --------------------------------------------------------------------------


def enqueue_due(now: datetime | None = None, using: str | None = None) -> Counter[str]:
    """One scheduler pass: fire every due tick once. Safe to run from any number of workers.

    Returns counts: ``fired`` (jobs enqueued), ``taken`` (ticks another worker fired first),
    ``skipped`` (missed ticks dropped by the catch-up policy), ``run_now``, ``errors``.
    """
    counts: Counter[str] = Counter()
    specs = valid_schedules()
    if not specs:
        return counts
    alias = using or conf.get("DATABASE")
    now = now or db.database_now(alias)
    states = sql.states(list(specs), alias)
    for name, spec in specs.items():
        try:
            _run_schedule(spec, states[name], now, alias, counts)
        except (OperationalError, InterfaceError):
            raise  # the worker loop backs off and retries
        except Exception:
            counts["errors"] += 1
            logger.exception(
                "schedule.error %s: the pass failed; it is retried at the next one",
                name,
                extra={"action": "schedule.error", "schedule": name},
            )
    return counts


def _run_schedule(
    spec: ScheduleSpec, state: sql.ScheduleState, now: datetime, alias: str, counts: Counter[str]
) -> None:
    if state.run_now_requested:
        _run_now(spec, now, alias, counts)
    if not state.enabled:
        return
    cursor = state.next_fire_time
    if cursor is None or not spec.is_tick(cursor):
        sql.advance(spec.name, cursor, spec.next_after(now), alias)  # new, re-enabled, redefined
        return
    if cursor > now:
        return
    ticks, skipped, resume = _due(spec, cursor, now)
    if skipped:
        counts["skipped"] += skipped
        logger.info(
            "schedule.skipped %s: %s missed ticks dropped (catch_up=%s)",
            spec.name,
            skipped,
            spec.catch_up,
            extra={"action": "schedule.skipped", "schedule": spec.name},
        )
    for tick in ticks:
        counts["fired" if _fire(spec, tick, alias) else "taken"] += 1
    sql.advance(spec.name, cursor, resume, alias)


def _due(
    spec: ScheduleSpec, cursor: datetime, now: datetime
) -> tuple[list[datetime], int, datetime]:
    """(ticks to fire, ticks dropped, the next cursor) for the ticks in [cursor, now]."""
    resume = spec.next_after(now)
    latest = spec.latest_at_or_before(now)
    window = spec.window
    if spec.catch_up in ("latest", "none"):
        missed = _count_ticks(spec, cursor, latest)
        if window is not None and now - latest > window:
            return [], missed, resume
        return [latest], missed - 1, resume
    oldest = cursor if window is None else max(cursor, now - window)
    ticks = list(spec.ticks_between(oldest, now, MAX_FIRES_PER_PASS))
    dropped = _count_ticks(spec, cursor, oldest - _EPSILON) if oldest > cursor else 0
    if len(ticks) == MAX_FIRES_PER_PASS and ticks[-1] < latest:
        resume = spec.next_after(ticks[-1])  # the rest at the next pass
    return ticks, dropped, resume


def _count_ticks(spec: ScheduleSpec, first: datetime, last: datetime, cap: int = 10_000) -> int:
    return sum(1 for _ in spec.ticks_between(first, last, cap))


def _fire(spec: ScheduleSpec, fire_time: datetime, alias: str) -> int | None:
    """Insert the fire row and, if this call inserted it, the job: one transaction.

    Returns the job id, or None when another worker fired this tick first.
    """
    from .enqueue import enqueue

    with transaction.atomic(using=alias):
        fire_id = sql.insert_fire(spec.name, fire_time, alias)
        if fire_id is None:
            return None
        job = enqueue(
            spec.type,
            dict(spec.config),
            queue=spec.queue,
            priority=spec.priority,
            operated_by=f"schedule:{spec.name}",
            using=alias,
        )
        sql.record_fire(fire_id, spec.name, fire_time, job.id, alias)
    logger.info(
        "schedule.fired %s@%s -> %s#%s",
        spec.name,
        fire_time.isoformat(),
        spec.type,
        job.id,
        extra={
            "action": "schedule.fired",
            "schedule": spec.name,
            "job_id": job.id,
            "job_type": spec.type,
        },
    )
    return job.id


def _run_now(spec: ScheduleSpec, now: datetime, alias: str, counts: Counter[str]) -> None:
    """Fire once at ``now``; the flag is cleared by whoever fires, in the same transaction."""
    with transaction.atomic(using=alias):
        if sql.take_run_now(spec.name, alias) and _fire(spec, now, alias) is not None:
            counts["run_now"] += 1
            counts["fired"] += 1
