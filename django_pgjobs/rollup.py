"""Rollups the dashboard reads, written cheaply by the workers; they outlive pruned jobs.

- ``pgjobs_stat_minute``: per minute x queue x type, runs completed / failed / retried, the sum of
  their durations and a log-scale duration histogram (percentiles without the raw rows).
- ``pgjobs_depth_sample``: per minute x queue, due / scheduled / running jobs and the age of the
  oldest due one.

No database work per job: the worker hands each batch of finished runs to in-memory counters (a
``job_reaped`` receiver adds the reaped ones). The worker's maintenance services
(worker/maintenance.py) flush them with ONE upsert every ``FLUSH_SECONDS`` (and at shutdown),
sample queue depth once a minute for the whole cluster (one worker per minute does the
counting) and prune old rollup rows once an hour.
The SQL of both tables is in ``sql/rollups.py``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import conf
from .sql import rollups as sql
from .status import JobStatus

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

logger = logging.getLogger("django_pgjobs.rollup")

FLUSH_SECONDS = 10.0
SAMPLE_SECONDS = 60.0
PRUNE_SECONDS = 3600.0

# --- the duration histogram --------------------------------------------------------------------
# Bucket 0: under 1 ms. Bucket i >= 1: [2^((i-1)/4), 2^(i/4)) ms, i.e. 4 buckets per doubling
# (about +-9 % around the bucket's middle); the last bucket takes everything from 2^24 ms (4.7 h).
PER_DOUBLING = 4
LAST_BUCKET = 1 + PER_DOUBLING * 24


def bucket_of(duration_ms: float) -> int:
    if duration_ms < 1:
        return 0
    return min(LAST_BUCKET, 1 + int(math.floor(PER_DOUBLING * math.log2(duration_ms))))


def bucket_middle(index: int) -> float:
    """A representative duration (ms) of a bucket: the geometric middle of its bounds."""
    if index <= 0:
        return 0.5
    return 2 ** ((index - 0.5) / PER_DOUBLING)


def percentile(hist: Sequence[int], q: float) -> float | None:
    """The q-quantile (0..1) of the durations counted in ``hist``, or None when it is empty."""
    total = sum(hist)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(hist):
        seen += count
        if count and seen >= rank:
            return bucket_middle(index)
    return bucket_middle(len(hist) - 1)


def merge_hist(a: Sequence[int], b: Sequence[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


# --- recording (in memory, per worker) ----------------------------------------------------------

OUTCOME_OF_STATUS = {
    JobStatus.COMPLETED: "completed",
    JobStatus.COMPLETED_WITH_ERRORS: "completed",
    JobStatus.FAILED: "failed",
    JobStatus.PENDING: "retried",
}


@dataclass
class _Acc:
    completed: int = 0
    failed: int = 0
    retried: int = 0
    duration_sum_ms: int = 0
    hist: dict[int, int] = field(default_factory=dict)

    def add(self, outcome: str, duration_ms: int | None) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        if duration_ms is not None:
            self.duration_sum_ms += int(duration_ms)
            b = bucket_of(duration_ms)
            self.hist[b] = self.hist.get(b, 0) + 1

    def merge(self, other: _Acc) -> None:
        self.completed += other.completed
        self.failed += other.failed
        self.retried += other.retried
        self.duration_sum_ms += other.duration_sum_ms
        for b, n in other.hist.items():
            self.hist[b] = self.hist.get(b, 0) + n

    def hist_list(self) -> list[int]:
        if not self.hist:
            return []
        out = [0] * (max(self.hist) + 1)
        for b, n in self.hist.items():
            out[b] = n
        return out


def _minute(ts: float) -> datetime:
    return datetime.fromtimestamp(ts - ts % 60, tz=UTC)


class Recorder:
    """In-memory counters keyed by (minute, queue, type), flushed with one upsert."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[datetime, str, str], _Acc] = {}
        self._reaped: list[tuple[float, int, str, str]] = []  # (ts, job id, type, status)

    def record(
        self,
        queue: str,
        type: str,
        outcome: str,
        duration_ms: int | None,  # noqa: A002
        at: float | None = None,
    ) -> None:
        key = (_minute(time.time() if at is None else at), queue, type)
        with self._lock:
            self._acc(key).add(outcome, duration_ms)

    def record_finished(self, finished: Iterable[tuple[str, str, Any]]) -> None:
        """(queue, type, completion) of the runs a worker just wrote: one lock per batch."""
        minute = _minute(time.time())
        with self._lock:
            for queue, job_type, completion in finished:
                outcome = OUTCOME_OF_STATUS.get(completion.status)
                if outcome is not None:
                    self._acc((minute, queue, job_type)).add(outcome, completion.duration_ms)

    def _acc(self, key: tuple[datetime, str, str]) -> _Acc:
        """The counters of one (minute, queue, type); call with the lock held."""
        acc = self._counts.get(key)
        if acc is None:
            acc = self._counts[key] = _Acc()
        return acc

    def on_reaped(self, sender: Any, job_id: int, status: str, **kwargs: Any) -> None:
        with self._lock:
            self._reaped.append((time.time(), job_id, str(sender), status))

    def pending(self) -> bool:
        with self._lock:
            return bool(self._counts or self._reaped)

    def flush(self, using: str | None = None) -> int:
        """Write what was recorded since the last flush; returns the number of rows upserted.

        On a database error the counts are kept for the next flush (nothing is lost or doubled:
        the upsert is one statement).
        """
        with self._lock:
            counts, self._counts = self._counts, {}
            reaped, self._reaped = self._reaped, []
        try:
            if reaped:
                self._add_reaped(counts, reaped, using)  # reaped ones join the counts
        except BaseException:
            self._put_back(counts, reaped)
            raise
        try:
            if counts:
                _upsert(counts, using)
        except BaseException:
            self._put_back(counts, [])
            raise
        return len(counts)

    def _put_back(
        self,
        counts: dict[tuple[datetime, str, str], _Acc],
        reaped: list[tuple[float, int, str, str]],
    ) -> None:
        with self._lock:
            for key, acc in counts.items():
                self._acc(key).merge(acc)
            self._reaped.extend(reaped)

    def _add_reaped(
        self,
        counts: dict[tuple[datetime, str, str], _Acc],
        reaped: list[tuple[float, int, str, str]],
        using: str | None,
    ) -> None:
        """Reaped jobs count as failed (attempts exhausted) or retried; find their queues."""
        queue_of = sql.queues_of([r[1] for r in reaped], using)
        for ts, job_id, job_type, status in reaped:
            outcome = "failed" if status == JobStatus.FAILED else "retried"
            key = (_minute(ts), queue_of.get(job_id, "?"), job_type)
            counts.setdefault(key, _Acc()).add(outcome, None)


def _upsert(counts: dict[tuple[datetime, str, str], _Acc], using: str | None) -> None:
    rows = [
        {
            "minute": minute.isoformat(),
            "queue": queue,
            "type": type_,
            "completed": a.completed,
            "failed": a.failed,
            "retried": a.retried,
            "duration_sum_ms": a.duration_sum_ms,
            "duration_hist": a.hist_list(),
        }
        for (minute, queue, type_), a in sorted(counts.items())  # sorted: no upsert deadlocks
    ]
    sql.upsert_minutes(rows, using)


def retention_days() -> float:
    return float(conf.get_settings().get("ROLLUP_RETENTION_DAYS", 30))


# --- reading ----------------------------------------------------------------------------------


def totals(since: datetime, group_by: str, using: str | None = None) -> dict[str, dict[str, Any]]:
    """Per queue or per type since ``since``: completed, failed, retried, runs, duration sum and
    the merged histogram."""
    out: dict[str, dict[str, Any]] = {}
    for key, completed, failed, retried, dsum, hist in sql.minute_rows(since, group_by, using):
        t = out.setdefault(
            key, {"completed": 0, "failed": 0, "retried": 0, "duration_sum_ms": 0, "hist": []}
        )
        t["completed"] += completed
        t["failed"] += failed
        t["retried"] += retried
        t["duration_sum_ms"] += dsum
        t["hist"] = merge_hist(t["hist"], hist if isinstance(hist, list) else json.loads(hist))
    return out
