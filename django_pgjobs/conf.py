"""The PGJOBS setting: one dict merged over defaults, read lazily, refreshed on setting_changed.

SETTINGS below is the one statement of every key: its default, what a value must be (its rule),
the system check that refuses it, its line in docs/settings.md, the WorkerOptions field it
defaults and its runjobs flag. DEFAULTS, the checks of checks.py, WorkerOptions' defaults and
from_settings, runjobs' flags, the docs' table and the README's flags table are derived from it
(regenerate both tables with ``.venv/bin/python scripts/settings_doc.py``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .validation import QUEUE_NAME_PATTERN

# Longest duration a seconds setting or flag takes (~115 days, runjobs' flags' old cap): far
# below where a thread's wait overflows (threading.TIMEOUT_MAX), longer than anything useful.
MAX_SECONDS = 1e7


def _num(x: float) -> str:
    """1e7 -> '1e7', 3.0 -> '3': bounds as the messages show them."""
    return f"{x:g}".replace("e+0", "e").replace("e+", "e")


def _one_of(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


# --- rules: what a value must be; accepts(value) and what (the messages' wording) --------------


@dataclass(frozen=True)
class Number:
    """A finite int or float, never a bool, between low and high; None too if `none`."""

    low: float = 0
    high: float = math.inf
    low_inclusive: bool = False
    high_inclusive: bool = True
    unit: str = ""  # "seconds", "days": the noun of the messages
    none: bool = False  # None accepted (TIMEOUT: no limit)
    parse: ClassVar[Callable[[str], Any]] = float  # how a runjobs flag reads it

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.none
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        above = value >= self.low if self.low_inclusive else value > self.low
        below = value <= self.high if self.high_inclusive else value < self.high
        finite = not isinstance(value, float) or math.isfinite(value)  # ints are finite
        return above and below and finite  # NaN fails the comparisons too

    @property
    def what(self) -> str:
        noun = "a number" if self.high < math.inf else "a finite number"
        text = f"{noun} of {self.unit}" if self.unit else noun
        text += f" {'>=' if self.low_inclusive else '>'} {_num(self.low)}"
        if self.high < math.inf:
            text += f" and {'<=' if self.high_inclusive else '<'} {_num(self.high)}"
        return f"None or {text}" if self.none else text


@dataclass(frozen=True)
class Int:
    """An int (never a bool) >= low."""

    low: int
    parse: ClassVar[Callable[[str], Any]] = int

    def accepts(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= self.low

    @property
    def what(self) -> str:
        return f"an integer >= {self.low}"


@dataclass(frozen=True)
class Bool:
    """True or False themselves: a string such as "false" would otherwise be truthy."""

    what: ClassVar[str] = "True or False"

    def accepts(self, value: Any) -> bool:
        return value is True or value is False


@dataclass(frozen=True)
class OneOf:
    """One of the choices, of the same type too (1 == True, yet 1 is no choice of True)."""

    choices: tuple[Any, ...]

    def accepts(self, value: Any) -> bool:
        return any(value == c and type(value) is type(c) for c in self.choices)

    @property
    def what(self) -> str:
        return _one_of([repr(c) for c in self.choices])


@dataclass(frozen=True)
class Strings:
    """A list or tuple of strings."""

    what: ClassVar[str] = "a list of strings"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


@dataclass(frozen=True)
class Alias:
    """A key of settings.DATABASES."""

    what: ClassVar[str] = "an alias in DATABASES"

    def accepts(self, value: Any) -> bool:
        from django.db import connections

        return isinstance(value, str) and value in connections.settings


@dataclass(frozen=True)
class Custom:
    """Whatever test(value) accepts, described by `what`."""

    test: Callable[[Any], bool]
    what: str

    def accepts(self, value: Any) -> bool:
        return self.test(value)


@dataclass(frozen=True)
class Special:
    """Checked by `function`, a registered check of checks.py, not by a rule."""

    what: str
    function: str

    def accepts(self, value: Any) -> bool:
        return True


Rule = Number | Int | Bool | OneOf | Strings | Alias | Custom | Special


def _channel_name(value: Any) -> bool:
    # pg_notify() refuses names over 63 bytes; a NUL cannot travel in a query.
    return (
        isinstance(value, str)
        and "\x00" not in value
        and 0 < len(value.encode("utf-8", "surrogatepass")) <= 63
    )


def _queue_name(value: Any) -> bool:
    return isinstance(value, str) and re.match(QUEUE_NAME_PATTERN, value) is not None


def _listen_target(value: Any) -> bool:
    from django.db import connections

    return value is None or (
        isinstance(value, str)
        and "\x00" not in value
        and (value in connections.settings or "=" in value or "://" in value)
    )


SECONDS = Number(unit="seconds", high=MAX_SECONDS)


# --- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """runjobs' flag overriding a setting for one worker; its dest is the setting's option."""

    name: str
    help: str


@dataclass(frozen=True)
class Warn:
    """An accepted value below `below` is worth a warning, `check`, for the setting and its flag."""

    below: float
    check: str
    text: str

    def message(self, subject: str, value: Any) -> str | None:
        return f"{subject} {self.text}" if value is not None and value < self.below else None


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    rule: Rule
    check: str  # id of the error when the rule refuses a value
    doc: str  # its one line in docs/settings.md
    option: str = ""  # the WorkerOptions field it defaults (from_settings)
    flag: Flag | None = None
    warn: Warn | None = None
    hint: str = ""  # the error's hint; default: the setting's default


SETTINGS: list[Setting] = [
    # E007 (the alias is not PostgreSQL) is the hand-written follow-up in checks.py.
    Setting(
        "DATABASE",
        "default",
        Alias(),
        "pgjobs.E006",
        "database alias of every table and statement of the queue; a database of its own: "
        "see docs/queue-database.md (QueueRouter, W006)",
        option="using",
    ),
    Setting(
        "DEFAULT_QUEUE",
        "default",
        Custom(_queue_name, "a queue name"),
        "pgjobs.E012",
        "queue of a job when neither `enqueue()` nor its handler names one",
        hint="1-63 characters among letters, digits and '_.:-', starting with a letter, "
        "digit or '_'",
    ),
    Setting(
        "MAX_ATTEMPTS",
        5,
        Int(1),
        "pgjobs.E004",
        "attempts before a failing job goes to `FAILED` (per handler: `max_attempts=`)",
    ),
    Setting(
        "BACKOFF_BASE",
        5.0,
        SECONDS,
        "pgjobs.E003",
        "seconds before the second attempt; doubles each attempt (`backoff_base=`)",
    ),
    Setting(
        "BACKOFF_MAX",
        3600.0,
        SECONDS,
        "pgjobs.E003",
        "cap of the backoff, seconds (`backoff_max=`)",
    ),
    Setting(
        "BACKOFF_JITTER",
        0.1,
        Number(low_inclusive=True, high=1, high_inclusive=False),
        "pgjobs.E008",
        "± fraction added to each delay so that failures do not retry in step",
    ),
    Setting(
        "TIMEOUT",
        None,
        Number(unit="seconds", high=MAX_SECONDS, none=True),
        "pgjobs.E005",
        "default wall-clock limit of a handler, seconds (`timeout=`)",
    ),
    Setting(
        "LEASE_SECONDS",
        30.0,
        SECONDS,
        "pgjobs.E003",
        "how long a RUNNING job is owned without a heartbeat (renewed every third of it); "
        "a worker counts alive while it beats within 3 of its own leases",
        option="lease_seconds",
        flag=Flag(
            "--lease",
            "lease of a running job in seconds, renewed every third of it by the heartbeat",
        ),
        warn=Warn(
            3,
            "pgjobs.W001",
            "under 3 s: a busy worker may lose leases between "
            "heartbeats (every third of the lease)",
        ),
    ),
    Setting(
        "REAP_INTERVAL",
        10.0,
        SECONDS,
        "pgjobs.E003",
        "seconds between two rescues of expired leases by a worker",
        option="reap_interval",
        flag=Flag("--reap-interval", "seconds between two rescues of jobs whose lease expired"),
    ),
    Setting(
        "CONCURRENCY",
        10,
        Int(1),
        "pgjobs.E004",
        "handler threads per worker",
        option="concurrency",
        flag=Flag("--concurrency", "handler threads, each with its own connection"),
    ),
    Setting(
        "ASYNC_CONCURRENCY",
        100,
        Int(1),
        "pgjobs.E004",
        "`async def` handlers in flight per worker, on its one event loop (docs/async.md)",
        option="async_concurrency",
        flag=Flag("--async-concurrency", "async def handlers in flight on the event loop"),
    ),
    Setting(
        "BATCH_SIZE",
        200,
        Int(1),
        "pgjobs.E004",
        "most jobs claimed per round trip",
        option="batch_size",
        flag=Flag("--batch-size", "max jobs claimed per round trip"),
    ),
    Setting(
        "PREFETCH",
        200,
        Int(0),
        "pgjobs.E004",
        "jobs a worker may hold beyond one per thread, only while every job it holds is of a "
        'type that usually runs in under 1 ms; 0 turns it off. See "Prefetch" in '
        "docs/architecture.md",
        option="prefetch",
        flag=Flag("--prefetch", "jobs held beyond one per thread while all are short (0: none)"),
    ),
    Setting(
        "POLL_INTERVAL",
        1.0,
        SECONDS,
        "pgjobs.E003",
        "polling fallback when no NOTIFY arrives, seconds",
        option="poll_interval",
        flag=Flag("--poll-interval", "seconds between polls when no NOTIFY arrives"),
    ),
    Setting(
        "SHUTDOWN_TIMEOUT",
        30.0,
        Number(unit="seconds", high=MAX_SECONDS, low_inclusive=True),
        "pgjobs.E003",
        "seconds running jobs get after SIGTERM",
        option="shutdown_timeout",
        flag=Flag("--shutdown-timeout", "seconds running jobs get to finish after SIGTERM"),
    ),
    Setting(
        "FAIR_SHARE",
        False,
        Bool(),
        "pgjobs.E011",
        "interleave tenants round-robin in each claim",
        option="fair_share",
    ),
    Setting(
        "MAX_CONFIG_BYTES",
        1024 * 1024,
        Number(),
        "pgjobs.E003",
        "largest config accepted by `enqueue()` (UTF-8 bytes of its JSON)",
    ),
    Setting(
        "MAX_CONFIG_DEPTH", 64, Number(), "pgjobs.E003", "deepest nesting accepted in a config"
    ),
    Setting(
        "MAX_RESULT_BYTES",
        1024 * 1024,
        Number(),
        "pgjobs.E003",
        'a larger handler result is replaced by `{"result_truncated": true, "result_bytes": n}`',
    ),
    Setting(
        "MAX_ERROR_CHARS",
        16 * 1024,
        Number(),
        "pgjobs.E003",
        "longer errors/tracebacks keep their head and tail",
    ),
    Setting(
        "WORKFLOW_MAX_JOBS",
        100_000,
        Int(1),
        "pgjobs.E003",
        "most jobs one workflow or batch may enqueue (workflows.py)",
    ),
    Setting(
        "AUTODISCOVER_MODULES",
        ["jobs", "tasks"],
        Strings(),
        "pgjobs.E013",
        "modules imported in every installed app at startup (`@handler`, Django `@task`)",
    ),
    Setting(
        "NOTIFY_CHANNEL",
        "pgjobs",
        Custom(_channel_name, "a name of 1-63 bytes"),
        "pgjobs.E009",
        "LISTEN/NOTIFY channel of the wakeups",
        hint="PostgreSQL's pg_notify() refuses longer names: every enqueue would fail",
    ),
    Setting(
        "LISTEN_DATABASE",
        None,
        Custom(_listen_target, "None, an alias in DATABASES or a libpq connection string"),
        "pgjobs.E015",
        "where the worker's listener connects to LISTEN: `None`, the queue's database; an "
        'alias of `DATABASES` or a libpq connection string (`"host=… dbname=…"`, '
        '`"postgresql://…"`) naming a direct connection, for a queue database behind a '
        "transaction pooler (without one such a worker polls: see docs/topology.md, W002)",
        hint="an alias such as 'direct', or 'postgresql://user@db-host:5432/app'",
    ),
    Setting(
        "PREPARED_STATEMENTS",
        "auto",
        OneOf(("auto", True, False)),
        "pgjobs.E010",
        "prepare enqueue's INSERT and the worker's finalize and claim on the server "
        '(psycopg\'s protocol-level prepared statements, once per connection). `"auto"`: '
        "yes, unless the database sets `DISABLE_SERVER_SIDE_CURSORS` (what Django's docs ask "
        "for behind a transaction-mode pooler) or the connection is found to go through a "
        "pooler; `False`: never; `True` forces them (PgBouncer >= 1.21 with "
        "`max_prepared_statements`), until a pooler refuses one (docs/topology.md)",
    ),
    Setting(
        "REDACT_KEYS",
        ["password", "passwd", "secret", "token", "authorization", "api_key", "apikey"],
        Strings(),
        "pgjobs.E013",
        "config keys hidden wherever django-pgjobs shows a config (substring, case-insensitive)",
    ),
    Setting(
        "SCHEDULES",
        {},
        Special("a dict: name -> schedule", "check_schedules_and_retention"),
        "pgjobs.E101",
        'cron schedules (see README, "Cron schedules"); checks E101-E107',
    ),
    Setting(
        "QUEUES",
        {},
        Special("a dict: queue -> flow controls", "check_flow_queues"),
        "pgjobs.E048",
        "flow control per queue: `concurrency`, `per_key`, `rate`, `burst`, `rate_per_key`, "
        "`key`, `fair` (docs/flow-control.md); the queue's row (`pgjobs_queue`, the admin) "
        "wins; checks E040-E048, E054-E055",
    ),
    Setting(
        "SCHEDULER_INTERVAL",
        5.0,
        SECONDS,
        "pgjobs.E109",
        "seconds between two scheduler passes of a worker",
        option="scheduler_interval",
    ),
    Setting(
        "RETENTION",
        {},
        Special("a dict: status -> days or None", "check_schedules_and_retention"),
        "pgjobs.E108",
        "days finished jobs are kept, per status, merged over `COMPLETED: 7`, "
        "`COMPLETED_WITH_ERRORS: 30`, `FAILED: 30`, `CANCELLED: 7`, `SCHEDULE_FIRES: 30` "
        "(`None`: keep forever)",
    ),
    Setting(
        "AGING",
        {},
        Special("a dict: queue -> {'every': seconds, 'max': priority}", "check_aging"),
        "pgjobs.E050",
        "opt-in per queue: a due job that waits is lifted one priority step per `every` seconds, "
        "up to `max` (default 100); a number is `every`. Checks E050-E053; see "
        "docs/flow-control.md",
    ),
    Setting(
        "PRUNE_INTERVAL",
        300.0,
        SECONDS,
        "pgjobs.E109",
        "seconds between two pruning passes of a worker",
        option="prune_interval",
    ),
    # Connections of a worker (netsafety.py): each bounds how long a dead link goes unnoticed.
    Setting(
        "CONNECT_TIMEOUT",
        10,
        Int(0),
        "pgjobs.E301",
        "seconds a worker's connection attempt may take, per host (libpq `connect_timeout`); "
        "0: no limit. See docs/topology.md",
    ),
    Setting(
        "TCP_KEEPALIVES_IDLE",
        5,
        Int(0),
        "pgjobs.E301",
        "seconds a worker's connection stays silent before TCP keepalive probes (libpq "
        "`keepalives_idle`, and the server's `tcp_keepalives_idle` for the session); "
        "0: the OS default",
    ),
    Setting(
        "TCP_KEEPALIVES_INTERVAL",
        2,
        Int(0),
        "pgjobs.E301",
        "seconds between two unanswered keepalive probes (`keepalives_interval`, "
        "`tcp_keepalives_interval`); 0: the OS default",
    ),
    Setting(
        "TCP_KEEPALIVES_COUNT",
        3,
        Int(0),
        "pgjobs.E301",
        "unanswered probes after which the connection is dead (`keepalives_count`, "
        "`tcp_keepalives_count`); 0: the OS default",
    ),
    Setting(
        "TCP_USER_TIMEOUT",
        10.0,
        Number(unit="seconds", low_inclusive=True, high=1e6),
        "pgjobs.E301",
        "seconds sent data may stay unacknowledged before a worker's connection is dropped "
        "(libpq `tcp_user_timeout`, the server's for the session); 0: the OS default",
    ),
    Setting(
        "ROLLUP_RETENTION_DAYS",
        30,
        Number(unit="days"),
        "pgjobs.E003",
        "days the dashboard's per-minute rollup and depth samples are kept",
    ),
]

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}
BY_OPTION: dict[str, Setting] = {s.option: s for s in SETTINGS if s.option}


def option_default(option: str) -> Any:
    """The default of the WorkerOptions field ``option``: its setting's (the field names it)."""
    return BY_OPTION[option].default


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


# --- docs/settings.md's table ---------------------------------------------------------------------

TABLE_START = "<!-- settings table: generated from conf.SETTINGS by scripts/settings_doc.py -->"
TABLE_END = "<!-- end of settings table -->"


def literal(value: Any) -> str:
    """A default as Python source: '"default"', '["jobs", "tasks"]', '30.0', 'None'."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return f"[{', '.join(literal(v) for v in value)}]"
    return repr(value)


def markdown_table() -> str:
    """The Settings table of docs/settings.md, between its two marker comments."""
    rows = [
        TABLE_START,
        "| key | default | accepts | check | `runjobs` flag | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        checks = s.check.removeprefix("pgjobs.") + (f", {s.warn.check[7:]}" if s.warn else "")
        flag = f"`{s.flag.name}`" if s.flag else ""
        rows.append(
            f"| `{s.name}` | `{literal(s.default)}` | {s.rule.what} | {checks} | {flag} | {s.doc} |"
        )
    return "\n".join([*rows, TABLE_END])


def replace_table(text: str) -> str:
    """`text` (docs/settings.md) with its settings table regenerated."""
    start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
    return text[:start] + markdown_table() + text[end:]
