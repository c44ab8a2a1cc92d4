"""Retention: finished jobs are deleted once older than ``PGJOBS["RETENTION"]`` days, per status.

    PGJOBS["RETENTION"] = {"COMPLETED": 7, "COMPLETED_WITH_ERRORS": 30, "FAILED": 30,
                           "CANCELLED": 7, "SCHEDULE_FIRES": 30}   # days; None keeps forever

Each worker runs :func:`prune_once` every ``PGJOBS["PRUNE_INTERVAL"]`` seconds; ``manage.py
pgjobs_prune`` runs it by hand. Deletes go in batches of ``batch`` ids, each its own short
statement that skips locked rows, so pruning never holds long locks nor a long transaction
(which would itself hold back vacuum). A pass stops after ``max_batches`` per status: a large
backlog is worked off over several passes instead of in one long burst. A worker's pass also
rests after each batch as long as the batch took (``rest``), so that working off a backlog takes
at most half of one database backend and leaves the claims their share.

Also pruned: ``pgjobs_schedule_fire`` rows (kept at least a day past the widest catch-up window
so that a tick can never fire twice), ``pgjobs_worker`` rows silent for
``sql.workers.FORGET_LEASES`` of their own lease, and ``pgjobs_unique`` rows of windows that
have passed (a job's window outlives the job: pruning the job never reopens it).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from . import conf, db, queries
from .sql import retention as sql
from .sql import unique as sql_unique
from .sql import workers as sql_workers
from .status import TERMINAL_STATUSES

logger = logging.getLogger("django_pgjobs.retention")

DEFAULTS: dict[str, float | None] = {
    "COMPLETED": 7,
    "COMPLETED_WITH_ERRORS": 30,
    "FAILED": 30,
    "CANCELLED": 7,
    "SCHEDULE_FIRES": 30,
}
JOB_STATUSES = tuple(str(s) for s in TERMINAL_STATUSES)
BATCH = 1000
MAX_BATCHES = 20


def policy() -> dict[str, float | None]:
    """Days kept per status (and for schedule fires): the setting merged over the defaults."""
    user = conf.get("RETENTION")
    return {**DEFAULTS, **(user if isinstance(user, dict) else {})}


def problems() -> list[str]:
    """What is wrong with PGJOBS['RETENTION'] (reported by manage.py check as pgjobs.E108)."""
    user = conf.get("RETENTION")
    if not isinstance(user, dict):
        return [f"PGJOBS['RETENTION'] must be a dict, got {type(user).__name__}"]
    found = []
    for key, days in user.items():
        if key not in DEFAULTS:
            found.append(
                f"PGJOBS['RETENTION'] has an unknown key {key!r} (known: {', '.join(DEFAULTS)})"
            )
        elif days is not None and (
            isinstance(days, bool) or not isinstance(days, int | float) or days <= 0
        ):
            found.append(f"PGJOBS['RETENTION'][{key!r}] must be days > 0 or None, got {days!r}")
    return found


def cutoffs(
    now: datetime, statuses: Iterable[str] | None = None, older_than: float | None = None
) -> dict[str, datetime]:
    """Per status, the finish time before which jobs go. ``older_than`` (days) overrides the
    policy, also for statuses kept forever."""
    keep = policy()
    found = {}
    for status in statuses or JOB_STATUSES:
        days = older_than if older_than is not None else keep[status]
        if days is not None:
            found[status] = now - timedelta(days=days)
    return found


def prune_once(
    now: datetime | None = None,
    *,
    batch: int = BATCH,
    max_batches: int | None = MAX_BATCHES,
    statuses: Iterable[str] | None = None,
    older_than: float | None = None,
    using: str | None = None,
    rest: Callable[[float], bool] | None = None,
) -> Counter[str]:
    """One pruning pass. Returns deleted counts per status, plus ``schedule_fires``, ``workers``,
    ``unique_windows``.

    ``max_batches=None`` runs until nothing is left (the management command). ``rest(seconds)``
    is called after each full batch with the time it took; it returns False to end the pass.
    """
    alias = using or conf.get("DATABASE")
    now = now or db.database_now(alias)
    counts: Counter[str] = Counter()
    for status, cutoff in cutoffs(now, statuses, older_than).items():
        done = 0
        while max_batches is None or done < max_batches:
            started = time.monotonic()
            n = queries.prune_finished(status=status, cutoff=cutoff, limit=batch, using=alias)
            counts[status] += n
            done += 1
            if n < batch:
                break
            if rest is not None and not rest(time.monotonic() - started):
                return _report(counts)
    if statuses is None and older_than is None:
        counts["schedule_fires"] = _prune_fires(now, alias)
        counts["workers"] = _prune_workers(now, alias)
        counts["unique_windows"] = sql_unique.prune_passed(
            batch=BATCH, max_batches=MAX_BATCHES, using=alias
        )
    return _report(counts)


def _report(counts: Counter[str]) -> Counter[str]:
    if sum(counts.values()):
        logger.info(
            "jobs.pruned %s",
            ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v),
            extra={"action": "jobs.pruned", "counts": dict(counts)},
        )
    return counts


def plan(
    now: datetime | None = None,
    *,
    statuses: Iterable[str] | None = None,
    older_than: float | None = None,
    using: str | None = None,
) -> dict[str, Any]:
    """What :func:`prune_once` would delete (for ``--dry-run``): {status: (cutoff, count)}."""
    alias = using or conf.get("DATABASE")
    now = now or db.database_now(alias)
    return {
        status: (cutoff, sql.count_prunable(status=status, cutoff=cutoff, using=alias))
        for status, cutoff in cutoffs(now, statuses, older_than).items()
    }


def fire_cutoff(now: datetime) -> datetime | None:
    """Fire rows older than this may go: past the retention, and a day past the widest
    catch-up window (a fire row younger than that still guards its tick)."""
    days = policy()["SCHEDULE_FIRES"]
    if days is None:
        return None
    from . import scheduler

    widest = max((s.window or timedelta(0) for s in scheduler.load()[0]), default=timedelta(0))
    return now - max(timedelta(days=days), widest + timedelta(days=1))


def _prune_fires(now: datetime, alias: str) -> int:
    cutoff = fire_cutoff(now)
    if cutoff is None:
        return 0
    return sql.prune_fires(cutoff, batch=BATCH, max_batches=MAX_BATCHES, using=alias)


def _prune_workers(now: datetime, alias: str) -> int:
    """Rows of workers that vanished without saying goodbye (killed, host lost)."""
    return sql_workers.prune_forgotten(now, batch=BATCH, max_batches=MAX_BATCHES, using=alias)
