"""Why a pending job has not started: its queue is paused, its queue is at its concurrency limit,
or it waits for its next retry. One query answers for every queue of a page.

    queue_states(names)          -> {queue: QueueState} of the queues with a control row
    reason(job, state, now)      -> "queue paused" / "queue at its limit of 2" /
                                    "waiting for retry 1 at 17:03:10 (in 2 min)" / ""
    annotate(jobs)               -> sets job.pgjobs_wait on each job of a list page
    held(ids)                    -> {reason: [queue, ...]} of those jobs that are due but held
    held_text(ids)               -> the same in words: "queue paused (emails); …"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import formats, timezone

from . import conf, db
from .admin_format import span
from .status import RUNNING_SQL, JobStatus
from .tables import JOB_TABLE, QUEUE_TABLE


@dataclass(frozen=True, slots=True)
class QueueState:
    paused: bool
    limit: int | None
    running: int  # counted only up to limit + 1, and only for a limited queue


def queue_states(names: Iterable[str], using: str | None = None) -> dict[str, QueueState]:
    """Controls of the named queues, with their RUNNING jobs where a limit applies."""
    names = sorted(set(names))
    if not names:
        return {}
    with db.cursor(using or conf.get("DATABASE")) as cur:
        cur.execute(
            f"""SELECT q.name, q.paused, q.concurrency_limit,
                       CASE WHEN q.concurrency_limit IS NOT NULL THEN (
                           SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE} j
                               WHERE j.queue = q.name AND j.status = {RUNNING_SQL}
                               LIMIT q.concurrency_limit + 1) r) ELSE 0 END
                FROM {QUEUE_TABLE} q WHERE q.name = ANY(%s)""",
            [names],
        )
        return {n: QueueState(p, lim, r) for n, p, lim, r in cur.fetchall()}


def reason(job: Any, state: QueueState | None, now: datetime | None = None) -> str:
    """What keeps a PENDING job from starting now; "" when nothing does (or it is not
    pending, or merely scheduled for later)."""
    if job.status != JobStatus.PENDING:
        return ""
    now = now or timezone.now()
    due = job.run_after is None or job.run_after <= now
    parts = []
    if not due and job.attempts > 0:
        local = (
            timezone.localtime(job.run_after) if timezone.is_aware(job.run_after) else job.run_after
        )
        parts.append(
            f"waiting for retry {job.attempts} at {formats.time_format(local, 'H:i:s')}"
            f" (in {span((job.run_after - now).total_seconds())})"
        )
    if state is not None and state.paused:
        parts.append("queue paused")
    elif due and state is not None and state.limit is not None and state.running >= state.limit:
        parts.append(f"queue at its limit of {state.limit}")
    return "; ".join(parts)


def annotate(jobs: Sequence[Any], using: str | None = None, now: datetime | None = None) -> None:
    """job.pgjobs_wait = reason(...) for every job, with one query for all their queues."""
    now = now or timezone.now()
    states = queue_states({j.queue for j in jobs if j.status == JobStatus.PENDING}, using)
    for j in jobs:
        j.pgjobs_wait = reason(j, states.get(j.queue), now)


def held(ids: Sequence[int], using: str | None = None) -> dict[str, list[str]]:
    """Of these jobs, the pending ones already due that their queue holds back: {reason: the
    queues, sorted}."""
    from .models import Job

    jobs = list(
        Job.objects.using(using or conf.get("DATABASE"))
        .filter(id__in=list(ids), status=JobStatus.PENDING)
        .only("status", "queue", "run_after", "attempts")[:1000]
    )
    now = timezone.now()
    states = queue_states({j.queue for j in jobs}, using)
    out: dict[str, set[str]] = {}
    for j in jobs:
        why = reason(j, states.get(j.queue), now)
        if why and (j.run_after is None or j.run_after <= now):
            out.setdefault(why, set()).add(j.queue)
    return {why: sorted(qs) for why, qs in sorted(out.items())}


def held_text(ids: Sequence[int], using: str | None = None) -> str:
    """held() in words, for the admin's messages: 'queue paused (emails, mail); …'."""
    return "; ".join(f"{why} ({', '.join(qs)})" for why, qs in held(ids, using).items())
