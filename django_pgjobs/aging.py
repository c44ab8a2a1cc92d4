"""Aging, opt-in per queue: a due job that waits lifts one priority step per ``every`` seconds
of waiting, up to ``max``, so that a steady stream of higher-priority work cannot starve it.

    PGJOBS["AGING"] = {"reports": {"every": 60, "max": 10}, "emails": 300}  # 300: every 300 s

Its priority is ``base + floor(wait / every)`` (``base``: the priority given at enqueue, kept in
``base_priority`` from the first lift; ``wait``: now - run_after), computed by the maintenance
service worker/maintenance.Aging; the claim is unchanged. A job made to wait again (a retry
after backoff) keeps what it earned and climbs on once its new wait catches up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from . import conf
from .validation import PRIORITY_MAX, PRIORITY_MIN, QUEUE_NAME_PATTERN

PASS_MIN, PASS_MAX = 1.0, 60.0  # seconds between two passes of a worker, whatever `every` is


@dataclass(frozen=True, slots=True)
class Rule:
    queue: str
    every: float  # seconds of waiting per priority step
    max: int  # no lift above this priority


def rules(queues: list[str] | None = None) -> list[Rule]:
    """The valid rules of PGJOBS["AGING"] (a bad one is a system check's error), for
    ``queues`` (None: every queue)."""
    if problems():
        return []
    found = []
    for queue, entry in sorted(conf.get("AGING").items()):
        if queues is not None and queue not in queues:
            continue
        spec = entry if isinstance(entry, dict) else {"every": entry}
        found.append(Rule(queue, float(spec["every"]), int(spec.get("max", PRIORITY_MAX))))
    return found


def pass_interval(found: list[Rule]) -> float:
    """Half the shortest step, within [PASS_MIN, PASS_MAX]: a lift is at most that late."""
    return min(PASS_MAX, max(PASS_MIN, min(r.every for r in found) / 2))


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= conf.MAX_SECONDS
    )


def _priority(value: Any) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and PRIORITY_MIN <= value <= PRIORITY_MAX
    )


def problems() -> list[tuple[str, str]]:
    """(check id, message) for each fault of PGJOBS["AGING"] (checks.check_aging)."""
    value = conf.get("AGING")
    if not isinstance(value, dict):
        return [("pgjobs.E050", f"PGJOBS['AGING'] must be a dict, got {type(value).__name__}")]
    found = []
    for queue, entry in value.items():
        where = f"PGJOBS['AGING'][{queue!r}]"
        if not isinstance(queue, str) or not re.match(QUEUE_NAME_PATTERN, queue):
            found.append(
                ("pgjobs.E050", f"PGJOBS['AGING'] has a key that is no queue name: {queue!r}")
            )
            continue
        spec = entry if isinstance(entry, dict) else {"every": entry}
        unknown = sorted(set(spec) - {"every", "max"}, key=str)
        if unknown:
            found.append(
                ("pgjobs.E053", f"{where} has unknown keys {unknown!r} (known: every, max)")
            )
        if not _seconds(spec.get("every")):
            found.append(
                ("pgjobs.E051", f"{where}: 'every' must be seconds > 0, got {spec.get('every')!r}")
            )
        if "max" in spec and not _priority(spec["max"]):
            found.append(
                (
                    "pgjobs.E052",
                    f"{where}: 'max' must be a priority in [{PRIORITY_MIN}, {PRIORITY_MAX}], "
                    f"got {spec['max']!r}",
                )
            )
    return found
