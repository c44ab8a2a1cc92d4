"""Checks run at enqueue, before any SQL: a refused job leaves the caller's transaction usable;
and the worker's defensive decoding of a claimed config (decode_config), which raw SQL may have
written past those checks."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from itertools import repeat
from typing import Any

from .exceptions import ConfigTooLarge, InvalidJobConfig, InvalidJobOption

# Queue names travel in NOTIFY payloads, log lines and admin URLs: keep them boring.
QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$"
_QUEUE_NAME_RE = re.compile(QUEUE_NAME_PATTERN)
# The same rule in the tables' CHECK constraints, the length left to the varchar(63) columns:
# PostgreSQL re-checks a CHECK on every UPDATE of the row, and its regex engine is much slower
# with the bounded repetition {0,62} than without it.
QUEUE_NAME_DB_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$"
PRIORITY_MIN, PRIORITY_MAX = -100, 100  # the range of django.tasks


def check_queue(name: Any) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME_RE.match(name):
        raise InvalidJobOption(
            f"invalid queue name {name!r}: use 1-63 characters among letters, digits and "
            "'_.:-', starting with a letter, digit or '_'"
        )
    return name


def check_priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJobOption(f"priority must be an int, got {type(value).__name__}")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidJobOption(
            f"priority {value} is out of range [{PRIORITY_MIN}, {PRIORITY_MAX}] (higher runs first)"
        )
    return value


def check_max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJobOption(f"max_attempts must be an int >= 1, got {value!r}")
    return value


MAX_PERIOD_SECONDS = 10 * 365 * 86400  # a unique window or debounce longer than this is a mistake


def check_period(name: str, value: Any) -> float:
    """A timedelta or seconds, > 0 and finite: a unique window, a debounce, a max wait."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidJobOption(
            f"{name} must be a timedelta or a number of seconds, got {type(value).__name__}"
        )
    if not 0 < seconds <= MAX_PERIOD_SECONDS:  # NaN fails too
        raise InvalidJobOption(
            f"{name} must be > 0 and at most {MAX_PERIOD_SECONDS} seconds (10 years), got {value!r}"
        )
    return seconds


@dataclass(frozen=True, slots=True)
class Flow:
    """enqueue()'s flow-control options, checked: seconds, or None when not asked for."""

    unique_for: float | None = None
    debounce: float | None = None
    debounce_max_wait: float | None = None


NO_FLOW = Flow()


def check_flow(
    *,
    unique_key: Any,
    unique_for: Any,
    debounce: Any,
    debounce_key: Any,
    debounce_max_wait: Any,
    run_after: Any,
) -> Flow:
    """Which flow control enqueue() applies; InvalidJobOption for a combination that makes no
    sense (each option's meaning is in docs/flow-control.md)."""
    if unique_for is None and debounce is None and debounce_key is None:
        if debounce_max_wait is not None:
            raise InvalidJobOption("debounce_max_wait needs debounce= and debounce_key=")
        return NO_FLOW
    if unique_for is not None and not unique_key:
        raise InvalidJobOption("unique_for needs a unique_key: the key the window holds")
    if debounce is None and (debounce_key is not None or debounce_max_wait is not None):
        raise InvalidJobOption("debounce_key and debounce_max_wait need debounce=")
    if debounce is not None:
        if debounce_key is None:
            raise InvalidJobOption("debounce needs a debounce_key: the enqueues that merge")
        for name, value in (("unique_key", unique_key), ("unique_for", unique_for)):
            if value is not None:
                raise InvalidJobOption(
                    f"debounce cannot be combined with {name}: a debounced enqueue merges "
                    "into its key's pending job, it is never refused"
                )
        if run_after is not None:
            raise InvalidJobOption(
                "debounce cannot be combined with run_after: the debounce sets when it runs"
            )
    return Flow(
        unique_for=None if unique_for is None else check_period("unique_for", unique_for),
        debounce=None if debounce is None else check_period("debounce", debounce),
        debounce_max_wait=None
        if debounce_max_wait is None
        else check_period("debounce_max_wait", debounce_max_wait),
    )


def _where(path: list[str]) -> str:
    return "config" + "".join(path) if path else "config"


def _check_string(s: str, path: list[str]) -> None:
    if "\x00" in s:
        raise InvalidJobConfig(
            f"{_where(path)} contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot "
            "store; strip it or encode the value (e.g. base64)"
        )
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidJobConfig(
            f"{_where(path)} contains a lone surrogate ({exc.reason}); it is not valid UTF-8"
        ) from None


def check_json_value(value: Any, *, max_depth: int, path: list[str] | None = None) -> None:
    """Raise InvalidJobConfig unless ``value`` is plain JSON that jsonb stores unchanged.

    Iterative, so a 10,000-level nesting is refused cleanly instead of blowing the stack.
    """
    stack: list[tuple[Any, list[str], int]] = [(value, path or [], 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > max_depth:
            raise InvalidJobConfig(
                f"{_where(where)} is nested deeper than {max_depth} levels "
                "(PGJOBS['MAX_CONFIG_DEPTH'])"
            )
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if item.bit_length() > 4000:  # str() refuses ints over sys.get_int_max_str_digits()
                try:
                    str(item)
                except ValueError:
                    raise InvalidJobConfig(
                        f"{_where(where)} is an integer with thousands of digits, too long to "
                        "encode: pass it as a string"
                    ) from None
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidJobConfig(
                    f"{_where(where)} is {item!r}: NaN and Infinity are not JSON"
                )
            continue
        if isinstance(item, str):
            _check_string(item, where)
            continue
        if isinstance(item, list | tuple):
            for i, v in enumerate(item):
                stack.append((v, [*where, f"[{i}]"], depth + 1))
            continue
        if isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidJobConfig(
                        f"{_where(where)} has a key {k!r} of type {type(k).__name__}: "
                        "JSON object keys must be strings"
                    )
                _check_string(k, where)
                stack.append((v, [*where, f"[{k!r}]"], depth + 1))
            continue
        raise InvalidJobConfig(
            f"{_where(where)} is a {type(item).__module__}.{type(item).__qualname__}, which is "
            "not JSON: pass plain data (str, int, float, bool, None, list, dict) — e.g. an id "
            "instead of a model instance, an ISO string instead of a datetime"
        )


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# JSONEncoder.encode() builds a new C encoder at every call. This one is built once, with the
# same settings but no markers for circular references (they make an encoder single-use): a
# cycle ends in RecursionError instead of ValueError; encode_config reports both the same way.
_C_ENCODE = json.encoder.c_make_encoder and json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def _dumps(value: Any) -> tuple[str, int]:
    """The JSON text jsonb gets, and its UTF-8 size (a lone surrogate fails the encoding)."""
    text = "".join(_C_ENCODE(value, 0)) if _C_ENCODE else _ENCODER.encode(value)
    return text, len(text) if text.isascii() else len(text.encode("utf-8"))


def _encoder_suffices(text: str, *, containers: int) -> bool:
    """Whether the encoder's own checks were enough for ``text``, the encoding of objects whose
    keys are all strings (the caller checks that: the encoder turns 1 into "1").

    It lets through NUL and any nesting. Flat objects (``text`` holds just ``containers``
    brackets: one per object, plus the array's) without NUL cannot hold either; anything else
    gets the full walk of check_json_value.
    """
    return text.count("{") + text.count("[") == containers and "\\u0000" not in text


def _str_keys(obj: Mapping[Any, Any]) -> bool:
    return all(map(isinstance, obj, repeat(str)))  # no generator frame per key


def encode_config(config: Any, *, max_bytes: int, max_depth: int) -> str:
    """Validate and serialise a job config; returns the JSON text sent to PostgreSQL."""
    if config is None:
        config = {}
    if type(config) is not dict and not isinstance(config, Mapping):  # the ABC check: slow
        raise InvalidJobConfig(
            f"config must be a JSON object (a dict), got {type(config).__name__}"
        )
    try:  # the C encoder refuses most bad values itself; check_json_value then says where
        text, size = _dumps(config)
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        check_json_value(config, max_depth=max_depth)
        raise
    if not (_encoder_suffices(text, containers=1) and _str_keys(config)):
        check_json_value(config, max_depth=max_depth)
    if size > max_bytes:
        raise ConfigTooLarge(
            f"config is {size:,} bytes, over the {max_bytes:,}-byte limit "
            "(PGJOBS['MAX_CONFIG_BYTES']); store the payload elsewhere (a file, a table) and "
            "pass its reference"
        )
    return text


def encode_configs(
    configs: Sequence[Any], *, max_bytes: int, max_depth: int, first: int = 0
) -> str:
    """Validate configs and serialise them as one JSON array (bulk enqueue).

    Flat objects with string keys, the common case, are checked on the array's text in one
    pass of the C encoder; anything else goes through encode_config one by one. A refused
    config is named by its index: ``configs[i]`` (``first`` is the index of configs[0]).
    """
    plain = [{} if c is None else c for c in configs]
    if all(type(c) is dict for c in plain):
        try:
            text, size = _dumps(plain)
        except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
            pass
        else:  # the whole array under the limit: each config is
            if (
                size <= max_bytes
                and _encoder_suffices(text, containers=len(plain) + 1)
                and all(map(_str_keys, plain))
            ):
                return text
    parts = []
    for i, config in enumerate(configs):
        try:
            parts.append(encode_config(config, max_bytes=max_bytes, max_depth=max_depth))
        except InvalidJobConfig as exc:
            raise exc.__class__(f"configs[{first + i}]: {exc}") from None
    return "[" + ",".join(parts) + "]"


# The C scanner json.loads() ends in, without its Python layers (whitespace checks, error
# wrapping): a claimed config is decoded on the worker's hot path.
_SCAN_JSON = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by __init__


def decode_config(text: str) -> tuple[dict[str, Any], str | None]:
    """A claimed job's config (jsonb as text), or ``({}, why)`` when it cannot be handed to a
    handler. enqueue() refuses such configs; raw SQL can store them (jsonb takes 10,000 levels
    of nesting or a 5,000-digit number)."""
    try:
        config, end = _SCAN_JSON(text, 0)
        if end != len(text):  # jsonb's text holds nothing after the value
            raise ValueError(end)
    except (StopIteration, RecursionError, ValueError):
        try:  # json.loads() says what is wrong (or takes what the bare scanner did not)
            config = json.loads(text)
        except (RecursionError, ValueError) as exc:
            return {}, _refused(f"config cannot be decoded ({exc})")
    if isinstance(config, dict):
        return config, None
    return {}, _refused(f"config is a JSON {type(config).__name__}, not an object")


def _refused(reason: str) -> str:
    return f"{reason}; the job was not run (was it written with raw SQL?)"
