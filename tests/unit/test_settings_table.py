"""conf.SETTINGS, the one statement of each setting, and what is derived from it: DEFAULTS, the
system checks, WorkerOptions.from_settings and runjobs' flags."""

import dataclasses
import math

import pytest
from django.core import checks
from django.core.management.base import CommandError

from django_pgjobs import checks as pgjobs_checks
from django_pgjobs import conf
from django_pgjobs.management.arguments import flag_warnings
from django_pgjobs.management.commands.runjobs import Command
from django_pgjobs.worker import WorkerOptions

# DEFAULTS as conf.py stated them by hand before the table: deriving them changed none.
BEFORE_THE_TABLE = {
    "DATABASE": "default",
    "DEFAULT_QUEUE": "default",
    "MAX_ATTEMPTS": 5,
    "BACKOFF_BASE": 5.0,
    "BACKOFF_MAX": 3600.0,
    "BACKOFF_JITTER": 0.1,
    "TIMEOUT": None,
    "LEASE_SECONDS": 30.0,
    "REAP_INTERVAL": 10.0,
    "CONCURRENCY": 10,
    "BATCH_SIZE": 200,
    "PREFETCH": 200,
    "POLL_INTERVAL": 1.0,
    "SHUTDOWN_TIMEOUT": 30.0,
    "FAIR_SHARE": False,
    "ROLLUP_RETENTION_DAYS": 30,
    "MAX_CONFIG_BYTES": 1024 * 1024,
    "MAX_CONFIG_DEPTH": 64,
    "MAX_RESULT_BYTES": 1024 * 1024,
    "MAX_ERROR_CHARS": 16 * 1024,
    "AUTODISCOVER_MODULES": ["jobs", "tasks"],
    "PREPARED_STATEMENTS": "auto",
    "NOTIFY_CHANNEL": "pgjobs",
    "REDACT_KEYS": ["password", "passwd", "secret", "token", "authorization", "api_key", "apikey"],
    "SCHEDULES": {},
    "SCHEDULER_INTERVAL": 5.0,
    "RETENTION": {},
    "PRUNE_INTERVAL": 300.0,
    "LISTEN_DATABASE": None,  # added after the table
}
FIELDS = {f.name: f for f in dataclasses.fields(WorkerOptions)}


def pgjobs_ids() -> list[str]:
    return [m.id for m in checks.run_checks() if m.id and m.id.startswith("pgjobs.")]


def test_defaults_are_derived_unchanged():
    assert {k: conf.DEFAULTS[k] for k in BEFORE_THE_TABLE} == BEFORE_THE_TABLE
    assert set(conf.DEFAULTS) - set(BEFORE_THE_TABLE) == {  # added since, each with its tests
        "AGING",
        "CONNECT_TIMEOUT",
        "TCP_KEEPALIVES_IDLE",
        "TCP_KEEPALIVES_INTERVAL",
        "TCP_KEEPALIVES_COUNT",
        "TCP_USER_TIMEOUT",
        "ASYNC_CONCURRENCY",
        "WORKFLOW_MAX_JOBS",
        "QUEUES",
    }
    assert list(conf.DEFAULTS) == [s.name for s in conf.SETTINGS]  # one entry per name


def test_every_default_passes_its_own_rule(settings):
    settings.PGJOBS = {}
    assert all(s.rule.accepts(s.default) for s in conf.SETTINGS)
    assert [i for i in pgjobs_ids() if not i.startswith(("pgjobs.E1", "pgjobs.E2"))] == []


def test_each_option_is_a_worker_options_field_with_the_setting_default():
    for s in conf.SETTINGS:
        if s.option:
            assert FIELDS[s.option].default == s.default, s.name
        assert s.flag is None or s.option, f"{s.name}: a flag needs the option it sets"


def test_from_settings_reads_every_option_from_pgjobs(settings):
    changed = {
        "CONCURRENCY": 3,
        "ASYNC_CONCURRENCY": 40,
        "BATCH_SIZE": 7,
        "PREFETCH": 0,
        "POLL_INTERVAL": 0.5,
        "SHUTDOWN_TIMEOUT": 2.0,
        "LEASE_SECONDS": 12.0,
        "REAP_INTERVAL": 4.0,
        "FAIR_SHARE": True,
        "DATABASE": "server_binding",
        "SCHEDULER_INTERVAL": 9.0,
        "PRUNE_INTERVAL": 99.0,
    }
    assert set(changed) == {s.name for s in conf.SETTINGS if s.option}
    settings.PGJOBS = changed
    options = WorkerOptions.from_settings(batch_size=11, prefetch=None)
    for name, value in changed.items():
        expected = 11 if name == "BATCH_SIZE" else value  # an override that is not None wins
        assert getattr(options, conf.BY_NAME[name].option) == expected, name


def test_special_rules_name_a_registered_check():
    for s in conf.SETTINGS:
        if isinstance(s.rule, conf.Special):
            assert getattr(pgjobs_checks, s.rule.function) in checks.registry.registry.get_checks()


@pytest.mark.parametrize(
    ("pgjobs", "check_id"),
    [
        ({"FAIR_SHARE": "false"}, "pgjobs.E011"),  # a string is truthy: refused
        ({"FAIR_SHARE": 0}, "pgjobs.E011"),
        ({"PREPARED_STATEMENTS": 1}, "pgjobs.E010"),  # 1 == True, yet not a bool
        ({"TIMEOUT": True}, "pgjobs.E005"),
        ({"TIMEOUT": 1e8}, "pgjobs.E005"),
        ({"LEASE_SECONDS": 1e8}, "pgjobs.E003"),  # seconds: at most 1e7, as the flags
        ({"SHUTDOWN_TIMEOUT": -1}, "pgjobs.E003"),
        ({"SHUTDOWN_TIMEOUT": "30"}, "pgjobs.E003"),
        ({"ROLLUP_RETENTION_DAYS": 0}, "pgjobs.E003"),
        ({"MAX_CONFIG_DEPTH": math.inf}, "pgjobs.E003"),
        ({"BACKOFF_JITTER": True}, "pgjobs.E008"),
        ({"DATABASE": ["default"]}, "pgjobs.E006"),  # unhashable: refused, no crash
        ({"DEFAULT_QUEUE": "bad queue"}, "pgjobs.E012"),
        ({"AUTODISCOVER_MODULES": "jobs"}, "pgjobs.E013"),
        ({"REDACT_KEYS": ["ok", 5]}, "pgjobs.E013"),
        ({"SCHEDULER_INTERVAL": math.inf}, "pgjobs.E109"),
        ({"LEASE_SECONDS": 1}, "pgjobs.W001"),
        ({"TCP_KEEPALIVES_IDLE": 2.5}, "pgjobs.E301"),  # libpq takes whole seconds
        ({"TCP_KEEPALIVES_COUNT": -1}, "pgjobs.E301"),
        ({"CONNECT_TIMEOUT": None}, "pgjobs.E301"),
        ({"TCP_USER_TIMEOUT": "10"}, "pgjobs.E301"),
    ],
)
def test_wrong_types_and_values_are_refused(settings, pgjobs, check_id):
    settings.PGJOBS = pgjobs
    assert pgjobs_ids() == [check_id]


@pytest.mark.parametrize(
    "pgjobs",
    [
        {"FAIR_SHARE": True},
        {"SHUTDOWN_TIMEOUT": 0},
        {"TIMEOUT": 1e7},
        {"PREFETCH": 0},
        {"REDACT_KEYS": ("card",)},
        {"AUTODISCOVER_MODULES": []},
        {"BACKOFF_JITTER": 0},
        {"DEFAULT_QUEUE": "emails:low"},
        {"MAX_CONFIG_BYTES": 10**400},
        {"QUEUES": {"crm": {"per_key": 1, "key": "config.c", "rate": "10/s"}}},
        {"LEASE_SECONDS": 3},
        {"TCP_USER_TIMEOUT": 0.5},
        {"TCP_KEEPALIVES_IDLE": 0},
        {"CONNECT_TIMEOUT": 0},
    ],
)
def test_good_values_pass(settings, pgjobs):
    settings.PGJOBS = pgjobs
    assert pgjobs_ids() == []


def test_the_message_says_what_the_rule_accepts(settings):
    settings.PGJOBS = {"FAIR_SHARE": "false", "LEASE_SECONDS": -1}
    found = {m.id: m for m in pgjobs_checks.check_settings()}
    assert found["pgjobs.E011"].msg == "PGJOBS['FAIR_SHARE'] must be True or False, got 'false'"
    assert found["pgjobs.E011"].hint == "the default is False"
    assert found["pgjobs.E003"].msg == (
        "PGJOBS['LEASE_SECONDS'] must be a number of seconds > 0 and <= 1e7, got -1"
    )


# --- runjobs' flags -----------------------------------------------------------------------------


def parser():
    return Command().create_parser("manage.py", "runjobs")


def test_each_flagged_setting_has_its_flag_with_its_dest_and_help():
    actions = {a.option_strings[0]: a for a in parser()._actions if a.option_strings}
    flagged = [s for s in conf.SETTINGS if s.flag]
    assert sorted(s.flag.name for s in flagged) == [
        "--async-concurrency",
        "--batch-size",
        "--concurrency",
        "--lease",
        "--poll-interval",
        "--prefetch",
        "--reap-interval",
        "--shutdown-timeout",
    ]
    for s in flagged:
        action = actions[s.flag.name]
        assert (action.dest, action.help, action.default) == (s.option, s.flag.help, None)


@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["--lease", "12.5"], "lease_seconds", 12.5),
        (["--prefetch", "0"], "prefetch", 0),
        (["--shutdown-timeout", "0"], "shutdown_timeout", 0.0),
        (["--concurrency", "4"], "concurrency", 4),
    ],
)
def test_a_flag_reads_a_value_its_setting_accepts(args, option, value):
    got = vars(parser().parse_args(args))[option]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--lease", "1e8"),
        ("--lease", "nan"),
        ("--shutdown-timeout", "-1"),
        ("--batch-size", "1.5"),
        ("--prefetch", "-1"),
    ],
)
def test_a_flag_refuses_what_its_setting_refuses_in_its_words(flag, value):
    s = next(s for s in conf.SETTINGS if s.flag and s.flag.name == flag)
    with pytest.raises(CommandError) as error:  # exit 2 from the command line
        parser().parse_args([flag, value])
    assert f"argument {flag}: expected {s.rule.what}, got {value!r}" in str(error.value)


def test_a_short_lease_flag_warns_as_w001():
    opts = vars(parser().parse_args(["--lease", "0.01"]))
    assert flag_warnings(opts) == [
        "(pgjobs.W001) --lease 0.01 under 3 s: a busy worker may lose leases between "
        "heartbeats (every third of the lease)"
    ]
    assert flag_warnings(vars(parser().parse_args(["--lease", "3"]))) == []
    assert flag_warnings(vars(parser().parse_args([]))) == []
