"""Argument types shared by the management commands: a bad value is an argparse error, so the
command exits 2 with the message before it touches the database. The runjobs flags that mirror a
setting come from conf.SETTINGS, with the setting's rule as their type."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from .. import conf

N = TypeVar("N", int, float)


def bounded(
    parse: Callable[[str], N],
    *,
    low: float,
    high: float | None = None,
    low_inclusive: bool = True,
    what: str,
) -> Callable[[str], N]:
    """An argparse ``type=`` accepting ``parse(value)`` within [low, high] (NaN never)."""

    def check(value: str) -> N:
        try:
            n = parse(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
        above = n >= low if low_inclusive else n > low
        if not (above and (high is None or n <= high)):  # also false for NaN
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return n

    return check


def database_alias(value: str) -> str:
    """An argparse ``type=``: a key of settings.DATABASES."""
    if not conf.BY_NAME["DATABASE"].rule.accepts(value):
        from django.db import connections

        known = ", ".join(sorted(connections.settings))
        raise argparse.ArgumentTypeError(f"{value!r} is not an alias of DATABASES ({known})")
    return value


def add_database_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        type=database_alias,
        metavar="ALIAS",
        help="database alias of the queue (default: PGJOBS['DATABASE'])",
    )


def rule_type(rule: conf.Number | conf.Int) -> Callable[[str], Any]:
    """An argparse ``type=`` refusing what a setting's rule refuses, in the rule's words."""

    def check(value: str) -> Any:
        try:
            n = rule.parse(value)  # type: ignore[misc,call-arg]  # a field holding a function
        except ValueError:
            n = None
        if n is None or not rule.accepts(n):
            raise argparse.ArgumentTypeError(f"expected {rule.what}, got {value!r}")
        return n

    return check


positive_int = rule_type(conf.Int(1))


# --- runjobs' flags that mirror a setting ---------------------------------------------------------


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per conf.SETTINGS entry with a Flag; its dest is the WorkerOptions field."""
    for s in conf.SETTINGS:
        if s.flag:
            assert isinstance(s.rule, conf.Number | conf.Int)  # flags are numbers (conf.py)
            parser.add_argument(
                s.flag.name, type=rule_type(s.rule), dest=s.option, help=s.flag.help
            )


def setting_flags(opts: dict[str, Any]) -> dict[str, Any]:
    """{WorkerOptions field: the flag's value, None when not given}."""
    return {s.option: opts[s.option] for s in conf.SETTINGS if s.flag}


def flag_warnings(opts: dict[str, Any]) -> list[str]:
    """The warnings of the flags' values, as their settings' checks word them: '(pgjobs.W001)
    --lease 0.5 under 3 s: …'. A warning, not a refusal, as for the setting."""
    found = []
    for s in conf.SETTINGS:
        if not (s.flag and s.warn) or (value := opts.get(s.option)) is None:
            continue
        if message := s.warn.message(f"{s.flag.name} {value:g}", value):
            found.append(f"({s.warn.check}) {message}")
    return found
