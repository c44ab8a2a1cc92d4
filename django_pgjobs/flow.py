"""Flow control of a queue (PGJOBS["QUEUES"]): what a declaration means, checked and parsed.

A queue is *controlled* when it has a cluster-wide cap, a per-key limit, a rate or fair-share
weights; the claim takes its jobs on one serialised path (queries.claim_controlled). Values
set on the queue's pgjobs_queue row (the command, the admin) win over these (fair share is
declared here only); docs/flow-control.md.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from .exceptions import InvalidJobOption

PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d*)\s*([smhd])\s*$")
_KEY_PATH = re.compile(r"^config(\.[A-Za-z0-9_-]+)+$")
KEYS = {"concurrency", "per_key", "rate", "burst", "key", "rate_per_key", "fair"}


@dataclass(frozen=True, slots=True)
class FlowSettings:
    """A queue's declared controls; None: not declared (the row may still set it)."""

    concurrency: int | None = None
    per_key: int | None = None
    rate: float | None = None  # starts per second
    burst: int | None = None
    key: tuple[str, ...] | None = None  # the config path of the flow key, without "config"
    rate_per_key: bool | None = None
    fair: tuple[tuple[str, float], ...] | None = None  # weights per flow key, "default" included

    @property
    def controlled(self) -> bool:
        return any(v is not None for v in (self.concurrency, self.per_key, self.rate, self.fair))

    @property
    def fair_weights(self) -> dict[str, float]:
        """The weights of the named flow keys (without "default")."""
        return {k: w for k, w in self.fair or () if k != "default"}

    @property
    def default_weight(self) -> float:
        """The weight of a flow key ``fair`` does not name."""
        return dict(self.fair or ()).get("default", 1.0)


def parse_rate(value: Any) -> float:
    """ "10/s", "600/m", "5/10s", or a number of starts per second -> starts per second."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str) and (m := _RATE.match(value)):
        rate = float(m.group(1)) / ((float(m.group(2)) if m.group(2) else 1.0) * PERIODS[m[3]])
    else:
        raise ValueError(f'a rate is "N/s", "N/m", "N/h", "N/d" or "N/10s", got {value!r}')
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"a rate must be > 0 starts per period, got {value!r}")
    return rate


def rate_text(per_second: float | None) -> str:
    """10.0 -> "10/s", 1/3600 -> "1/h": the largest unit that shows at least one start."""
    if per_second is None:
        return "-"
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600)):
        if per_second * seconds >= 1:
            return f"{per_second * seconds:g}/{unit}"
    return f"{per_second * 86400:g}/d"


def fair_text(weights: tuple[tuple[str, float], ...] | None) -> str:
    """(("acme", 3.0), ("default", 1.0)) -> "acme=3,default=1"; "-" without fair share."""
    return ",".join(f"{k}={w:g}" for k, w in weights) if weights else "-"


def parse_key_path(value: Any) -> tuple[str, ...]:
    """ "config.customer_id" -> ("customer_id",)."""
    if not isinstance(value, str) or not _KEY_PATH.match(value):
        raise ValueError(f'a key path is "config.<field>[.<field>...]", got {value!r}')
    return tuple(value.split(".")[1:])


def parse_weights(value: Any) -> tuple[tuple[str, float], ...]:
    """{"default": 1, "acme": 3} -> (("acme", 3.0), ("default", 1.0)): weights > 0 per key."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"fair is a dict of flow keys to weights > 0, got {value!r}")
    weights = []
    for key, weight in value.items():
        number = isinstance(weight, int | float) and not isinstance(weight, bool)
        named = isinstance(key, str | int) and not isinstance(key, bool) and key != ""
        if not named or not number or not math.isfinite(weight):
            raise ValueError(f"fair: a weight is a number per flow key, got {key!r}: {weight!r}")
        if weight <= 0:
            raise ValueError(f"fair: the weight of {key!r} must be > 0, got {weight!r}")
        weights.append((str(key), float(weight)))  # an integer key is stored as its text
    return tuple(sorted(weights))


def _positive_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


# (setting key, check id, parser) in the order the checks report them.
FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("concurrency", "pgjobs.E041", lambda v: _positive_int("concurrency", v, 0)),
    ("per_key", "pgjobs.E042", lambda v: _positive_int("per_key", v, 1)),
    ("rate", "pgjobs.E043", parse_rate),
    ("burst", "pgjobs.E044", lambda v: _positive_int("burst", v, 1)),
    ("key", "pgjobs.E045", parse_key_path),
    ("rate_per_key", "pgjobs.E046", lambda v: _bool("rate_per_key", v)),
    ("fair", "pgjobs.E054", parse_weights),
)


def parse_queue(declared: Mapping[str, Any]) -> FlowSettings:
    """One queue's declaration; ValueError (with the check id as its second arg) if bad."""
    unknown = sorted(set(declared) - KEYS)
    if unknown:
        raise ValueError(f"unknown keys {unknown}: known {sorted(KEYS)}", "pgjobs.E040")
    values: dict[str, Any] = {}
    for name, check_id, parser in FIELDS:
        if declared.get(name) is not None:
            try:
                values[name] = parser(declared[name])
            except ValueError as exc:
                raise ValueError(str(exc), check_id) from None
    if values.get("per_key") is not None and "key" not in values:
        raise ValueError('per_key needs a key path ("key": "config.<field>")', "pgjobs.E047")
    if values.get("fair") is not None and "key" not in values:
        raise ValueError(
            'fair shares among flow keys: it needs "key": "config.<field>"', "pgjobs.E055"
        )
    return FlowSettings(**values)


def declared(queues: Any) -> dict[str, FlowSettings]:
    """PGJOBS["QUEUES"] parsed (bad declarations skipped: the checks report them)."""
    found: dict[str, FlowSettings] = {}
    if not isinstance(queues, Mapping):
        return found
    for name, value in queues.items():
        if isinstance(value, Mapping):
            try:
                found[name] = parse_queue(value)
            except ValueError:
                continue
    return found


def key_of(path: tuple[str, ...], config: Mapping[str, Any] | None, queue: str) -> str:
    """The flow key a config's ``path`` names; InvalidJobOption if missing or not a scalar."""
    value: Any = config or {}
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            raise InvalidJobOption(
                f"queue {queue!r} takes its flow key from config.{'.'.join(path)}, which this "
                "config lacks: add it, or pass flow_key="
            )
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise InvalidJobOption(
            f"the flow key at config.{'.'.join(path)} must be a non-empty string or an "
            f"integer, got {value!r}"
        )
    return str(value)


@functools.cache
def queues() -> dict[str, FlowSettings]:
    """The declarations of PGJOBS["QUEUES"], parsed once per settings."""
    from . import conf

    return declared(conf.get_settings().get("QUEUES"))


@functools.cache
def controlled_queues() -> tuple[str, ...]:
    """Queues PGJOBS["QUEUES"] puts under control: the unlimited claim leaves them alone."""
    return tuple(sorted(name for name, f in queues().items() if f.controlled))


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "PGJOBS":
        queues.cache_clear()
        controlled_queues.cache_clear()
