"""The job page's parts: the timeline (every event once, in time order, in plain words), the
attempts table and the item errors table. Pure functions of a Job row and the time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .admin_format import (
    as_datetime,
    error_summary,
    progress_bar,
    progress_numbers,
    redact,
    span,
    took_ms,
    when,
)
from .models import Job
from .status import JobStatus

# A history entry's outcome in plain words.
OUTCOMES = {
    "retry": "failed; retry scheduled",
    "attempts_exhausted": "failed, no attempts left",
    "failed": "failed (not retried)",
    "lease_lost": "lost its lease (the worker stopped heartbeating)",
    "lease_expired": "lease expired: the worker went silent; back in the queue",
    "released": "released at worker shutdown (the attempt does not count)",
    "PENDING": "failed; retry scheduled",
    "FAILED": "failed",
}
FINAL: dict[str, str] = {
    JobStatus.COMPLETED: "completed",
    JobStatus.COMPLETED_WITH_ERRORS: "completed with item errors",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELLED: "cancelled",
}
ENDS_JOB = {"attempts_exhausted", "failed", "cancel"}


def _entries(job: Job) -> list[dict[str, Any]]:
    return [
        e if isinstance(e, dict) else {"outcome": str(e)}
        for e in (job.history if isinstance(job.history, list) else [])
    ]


def _attempt_events(
    e: dict[str, Any],
    next_start: datetime | None,
    job: Job,
) -> list[tuple[datetime | None, str]]:
    start = as_datetime(e.get("started_at"))
    worker = e.get("worker") or "?"
    end = (
        start + timedelta(milliseconds=e["duration_ms"])
        if start and isinstance(e.get("duration_ms"), int | float)
        else start
    )
    outcome = str(e.get("outcome", "?"))
    took = f" after {took_ms(e.get('duration_ms'))}" if e.get("duration_ms") is not None else ""
    text = f"ended{took}: " + OUTCOMES.get(outcome, outcome.replace("_", " "))
    cls, line = error_summary(e.get("error"))
    if cls or line:
        text += f" — {cls}{': ' if cls and line else ''}{line[:160]}"
    if outcome in ("retry", "PENDING") and end is not None:
        if next_start is not None:
            text += f"; next attempt started {span((next_start - end).total_seconds())} later"
        elif job.status == JobStatus.PENDING and job.run_after:
            text += f"; due {span((job.run_after - end).total_seconds())} after it ended"
    return [
        (start, f"attempt {e.get('attempt', '?')} started on {worker}"),
        (end, f"attempt {e.get('attempt', '?')} {text}"),
    ]


def _operator_event(e: dict[str, Any]) -> tuple[datetime | None, str]:
    outcome, by = e.get("outcome"), e.get("by") or "an operator"
    at = as_datetime(e.get("at"))
    if outcome == "manual_retry":
        was = str(e.get("previous_status") or "?").replace("_", " ").lower()
        return at, f"retried by {by} (was {was}; attempts start again from 0)"
    if outcome == "duplicated_from":
        return None, f"created as a copy of job #{e.get('job_id')}"
    if outcome == "duplicated":
        return at, f"duplicated by {by} as job #{e.get('job_id')}"
    if outcome == "cancel":
        asked = e.get("status") == JobStatus.RUNNING
        return at, f"{'cancel requested' if asked else 'cancelled'} by {by}"
    if outcome == "run_now":
        return at, f"made due now by {by}"
    return at, str(outcome).replace("_", " ") + (f" by {by}" if e.get("by") else "")


def events(job: Job, now: datetime | None = None) -> list[tuple[datetime | None, str]]:
    """(time, text) of everything that happened to the job, oldest first, each once."""
    now = now or timezone.now()
    entries = _entries(job)
    out: list[tuple[datetime | None, str]] = [(job.created_at, "enqueued")]
    attempts = [e for e in entries if e.get("started_at")]
    if (
        not attempts
        and job.run_after
        and job.created_at
        and (job.run_after - job.created_at).total_seconds() > 1
        and not job.started_at
    ):
        out.append((job.run_after, "due (scheduled)"))
    starts = [as_datetime(e.get("started_at")) for e in attempts]
    for e in entries:
        if e.get("started_at"):
            i = attempts.index(e)
            nxt = (
                starts[i + 1]
                if i + 1 < len(starts)
                else (job.started_at if job.status != JobStatus.PENDING else None)
            )
            out += _attempt_events(e, nxt, job)
        else:
            out.append(_operator_event(e))
    logged_start = job.started_at and any(s == job.started_at for s in starts)
    if job.started_at and not logged_start:
        out.append((job.started_at, f"attempt {job.attempts} started on {job.locked_by or '?'}"))
    if job.status == JobStatus.RUNNING and job.started_at:
        out.append((now, f"running for {span((now - job.started_at).total_seconds())}"))
    last = str(entries[-1].get("outcome")) if entries else ""
    if job.finished_at and job.status in FINAL and last not in ENDS_JOB:
        took = f" after {took_ms(job.duration_ms)}" if job.duration_ms is not None else ""
        out.append((job.finished_at, FINAL[job.status] + (took if job.started_at else "")))
    return _in_time_order(out)


def _in_time_order(out: list[tuple[datetime | None, str]]) -> list[tuple[datetime | None, str]]:
    """Sorted by time; an event without one (older history entries) keeps its place after the
    event before it."""
    keyed, last = [], None
    for i, (t, text) in enumerate(out):
        last = t or last
        keyed.append(((last.timestamp() if last else 0.0), i, t, text))
    return [(t, text) for _, _, t, text in sorted(keyed)]


def timeline(job: Job, now: datetime | None = None) -> SafeString:
    rows = []
    for t, text in events(job, now):
        offset = (
            f"+{span((t - job.created_at).total_seconds())}"
            if t and job.created_at and t > job.created_at
            else ""
        )
        rows.append((when(t) if t else "–", offset, text))
    return format_html(
        '<table class="pgjobs-timeline"><thead><tr><th>time</th><th>since enqueue</th>'
        "<th>event</th></tr></thead><tbody>{}</tbody></table>",
        format_html_join(
            "", '<tr><td class="nowrap">{}</td><td class="num nowrap">{}</td><td>{}</td></tr>', rows
        ),
    )


def attempts_table(job: Job) -> SafeString | str:
    """One row per attempt; a manual retry's row between the runs it separates; a finished
    job's successful attempt (not in its history) last."""
    rows: list[SafeString] = []
    starts: set[object] = set()  # the start times already shown
    for e in _entries(job):
        if e.get("outcome") == "manual_retry" and rows:
            rows.append(
                format_html(
                    '<tr class="pgjobs-run-sep"><td colspan="6">manual retry by {} at {}: attempts '
                    "count again from 1</td></tr>",
                    e.get("by") or "an operator",
                    when(e.get("at")),
                )
            )
        if not e.get("started_at"):
            continue
        starts.add(as_datetime(e.get("started_at")))
        cls, line = error_summary(e.get("error"))
        outcome = str(e.get("outcome", "–"))
        rows.append(
            _attempt_row(
                e.get("attempt", "–"),
                OUTCOMES.get(outcome, outcome.replace("_", " ")),
                e.get("started_at"),
                e.get("worker"),
                e.get("duration_ms"),
                (e.get("error") or "")[:2000],
                f"{cls}: {line}" if cls else (line or "–"),
            )
        )
    done = job.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS)
    if done and job.started_at and job.started_at not in starts:
        rows.append(
            _attempt_row(
                job.attempts,
                FINAL[job.status],
                job.started_at,
                job.locked_by,
                job.duration_ms,
                "",
                "–",
            )
        )
    if not rows:
        return "–"
    return format_html(
        '<table class="pgjobs-history"><thead><tr><th>attempt</th><th>outcome</th>'
        "<th>started</th><th>worker</th><th>duration</th><th>error</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        format_html_join("", "{}", ((r,) for r in rows)),
    )


def _attempt_row(
    attempt: Any, outcome: str, started: Any, worker: Any, ms: Any, title: str, error: str
) -> SafeString:
    return format_html(
        '<tr><td>{}</td><td>{}</td><td class="nowrap">{}</td><td class="nowrap">'
        '{}</td><td class="nowrap">{}</td><td title="{}">{}</td></tr>',
        attempt,
        outcome,
        when(started),
        worker or "–",
        took_ms(ms),
        title,
        error,
    )


def item_errors(job: Job) -> list[dict[str, Any]]:
    errors = job.result.get("errors") if isinstance(job.result, dict) else None
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


def item_errors_table(job: Job, limit: int = 500) -> SafeString | str:
    """The handler's add_item_error() entries: item, error, then any other detail columns."""
    errors = redact(item_errors(job))
    if not errors:
        return "–"
    extra = sorted({k for e in errors[:limit] for k in e} - {"item", "error"})
    head = format_html_join("", "<th>{}</th>", ((k,) for k in ["item", "error", *extra]))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (
                format_html_join(
                    "", "<td>{}</td>", ((_cell(e.get(k)),) for k in ["item", "error", *extra])
                ),
            )
            for e in errors[:limit]
        ),
    )
    more = f"… and {len(errors) - limit:,} more" if len(errors) > limit else ""
    return format_html(
        '<p>{} item error(s){}</p><table class="pgjobs-history pgjobs-items">'
        "<thead><tr>{}</tr></thead><tbody>{}</tbody></table>",
        len(errors),
        f" ({more})" if more else "",
        head,
        body,
    )


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    return v if isinstance(v, str) else str(v)


def progress_cell(job: Job, now: datetime | None = None) -> SafeString | str:
    """The job page's progress: the bar (percent, ETA) when there is a total, and the report in
    words beside it, as the bar's tooltip is no use on a touch screen:
    '196 / 900 · resizing · reported 3 s ago', '69 done (no total given)'; "–" without one."""
    n = progress_numbers(job, now)
    if n is None:
        return "–"
    now = now or timezone.now()
    parts = [
        f"{n['done']:g} / {n['total']:g}"
        if n["total"] is not None
        else f"{n['done']:g} done (no total given)"
    ]
    if n["note"]:
        parts.append(str(n["note"]))
    if n["at"] is not None:
        parts.append(f"reported {span((now - n['at']).total_seconds())} ago")
    bar = progress_bar(job, now) if n["total"] is not None else ""
    return format_html('{} <span class="pgjobs-progress-told">{}</span>', bar, " · ".join(parts))
