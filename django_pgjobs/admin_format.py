"""How the admin pages write values: dates, relative times, durations, statuses, errors,
progress bars, and JSON with secrets masked. One format per kind of value on every page."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from datetime import timezone as _timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import formats, timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from . import conf
from .models import Job
from .status import JobStatus

MAX_PRETTY_CHARS = 200_000
UTC = _timezone.utc  # datetime.UTC is Python >= 3.11


def as_datetime(value: Any) -> datetime | None:
    """A datetime from a datetime or an ISO string (history entries store ISO text)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return parse_datetime(value)
        except ValueError:
            return None
    return None


def when(value: Any) -> SafeString | str:
    """The admin's locale-aware date with the time to the second; ISO 8601 in the title."""
    dt = as_datetime(value)
    if dt is None:
        return "–"
    local = timezone.localtime(dt) if timezone.is_aware(dt) else dt
    text = f"{formats.date_format(local, 'DATE_FORMAT')}, {formats.time_format(local, 'H:i:s')}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', dt.isoformat(), dt.isoformat(), text
    )


def span(seconds: float) -> str:
    """A duration in the two largest units: '850 ms', '12.3 s', '4 min 12 s', '2 h 3 min'."""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min {secs} s" if secs else f"{minutes} min"


def human_ms(ms: float | None) -> str:
    return "–" if ms is None else span(ms / 1000)


def in_zone(value: Any, zone: str, now: datetime | None = None) -> SafeString | str:
    """A time in a schedule's own time zone, named, with how far off it is: 'Dec. 3, 2026,
    03:00 CET' and under it 'in 18 h'; the instant in ISO 8601 (UTC) in the title."""
    dt = as_datetime(value)
    if dt is None:
        return "–"
    try:
        local = dt.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        local = dt.astimezone(UTC)
    delta = (dt - (now or timezone.now())).total_seconds()
    off = (
        "now" if abs(delta) < 0.5 else (f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago")
    )
    text = f"{formats.date_format(local, 'DATE_FORMAT')}, {local:%H:%M} {local.tzname()}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time><span class="pgjobs-sub">{}</span>',
        dt.isoformat(),
        dt.astimezone(UTC).isoformat(),
        text,
        off,
    )


def cron_line(cron: str, zone: str, catch_up: str) -> SafeString:
    """'0 3 * * *' on one line, its time zone under it, and the catch-up policy when it is not
    the default ('latest'); all of it in the title."""
    title = f"{cron} ({zone}, catch up: {catch_up})"
    extra = format_html(" · catch up: {}", catch_up) if catch_up != "latest" else ""
    return format_html(
        '<span title="{}"><code class="pgjobs-cron">{}</code><span class='
        '"pgjobs-sub">{}{}</span></span>',
        title,
        cron,
        zone,
        extra,
    )


def took_ms(ms: float | None) -> str:
    """A run's duration where 0 ms would read as 'nothing ran': under a millisecond '< 1 ms'."""
    if ms is None:
        return "–"
    return "< 1 ms" if ms < 1 else span(ms / 1000)


def relative(value: Any, now: datetime | None = None) -> SafeString | str:
    """'12 s ago', 'in 3 min 4 s': precise enough to tell jobs apart; the exact time in the
    title."""
    dt = as_datetime(value)
    if dt is None:
        return "–"
    now = now or timezone.now()
    delta = (dt - now).total_seconds()
    text = (
        "now" if abs(delta) < 0.5 else (f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago")
    )
    local = timezone.localtime(dt) if timezone.is_aware(dt) else dt
    title = (
        f"{formats.date_format(local, 'DATE_FORMAT')}, "
        f"{formats.time_format(local, 'H:i:s')} ({dt.isoformat()})"
    )
    return format_html('<time datetime="{}" title="{}">{}</time>', dt.isoformat(), title, text)


# --- statuses --------------------------------------------------------------------------------


def derived_status(job: Job, now: Any = None) -> str:
    """PENDING/RUNNING refined: scheduled (due later), retrying (attempts > 0), stale (RUNNING
    with an expired lease); other statuses as they are."""
    now = now or timezone.now()
    if job.status == JobStatus.RUNNING and job.lease_expires_at and job.lease_expires_at < now:
        return "stale"
    if job.status == JobStatus.PENDING:
        if job.attempts > 0:
            return "retrying"
        if job.run_after and job.run_after > now:
            return "scheduled"
    return job.status


# Badge colours with white text at a contrast of at least 4.5:1 (WCAG AA), light and dark mode.
STATUS_COLORS = {
    "WAITING": "#3f6f78",
    "PENDING": "#5f6b75",
    "scheduled": "#4a6b9c",
    "retrying": "#a85d00",
    "RUNNING": "#2964a0",
    "stale": "#7d3c98",
    "COMPLETED": "#23724a",
    "COMPLETED_WITH_ERRORS": "#76690f",
    "FAILED": "#b03020",
    "CANCELLED": "#5f6b6d",
}


def status_badge(job: Job) -> SafeString:
    label = derived_status(job)
    text = "with errors" if label == JobStatus.COMPLETED_WITH_ERRORS else label.lower()
    return format_html(
        '<span class="pgjobs-badge" style="background:{}" title="{}">{}</span>',
        STATUS_COLORS.get(label, "#555"),
        label.replace("_", " ").lower(),
        text,
    )


# --- progress ----------------------------------------------------------------------------------


def progress_numbers(job: Job, now: datetime | None = None) -> dict[str, Any] | None:
    """done, total, note, percent and ETA (seconds, from the rate since the job started) of a
    job's last progress report; None when it reported none."""
    p = job.progress
    if isinstance(p, str):  # JSONB read through a plain cursor arrives as text
        try:
            p = json.loads(p)
        except ValueError:
            p = None
    p = p if isinstance(p, dict) else None
    if not p or not isinstance(p.get("done"), int | float):
        return None
    done, total = float(p["done"]), p.get("total")
    total = float(total) if isinstance(total, int | float) and total > 0 else None
    percent = None if total is None else max(0.0, min(100.0, 100 * done / total))
    eta = None
    at = as_datetime(p.get("at"))
    if total is not None and done > 0 and job.started_at and job.status == JobStatus.RUNNING:
        elapsed = ((at or now or timezone.now()) - job.started_at).total_seconds()
        if elapsed > 0 and done < total:
            eta = elapsed / done * (total - done)
    return {
        "done": done,
        "total": total,
        "note": p.get("note"),
        "percent": percent,
        "eta_s": eta,
        "at": at,
    }


def progress_bar(job: Job, now: datetime | None = None) -> SafeString | str:
    n = progress_numbers(job, now)
    if n is None:
        return ""
    count = f"{n['done']:g}" + (f" / {n['total']:g}" if n["total"] is not None else "")
    eta = f" · ETA {span(n['eta_s'])}" if n["eta_s"] is not None else ""
    title = count + (f" · {n['note']}" if n["note"] else "") + eta
    if n["percent"] is None:
        return format_html(
            '<span class="pgjobs-progress-text" title="{}">{} done{}</span>', title, count, eta
        )
    return format_html(
        '<span class="pgjobs-progress" title="{}"><span class="pgjobs-progress-bar" '
        'role="progressbar" aria-valuenow="{}" aria-valuemin="0" aria-valuemax="100">'
        '<span style="width:{}%"></span></span> <span class="pgjobs-progress-text">{}%{}'
        "</span></span>",
        title,
        f"{n['percent']:.0f}",
        f"{n['percent']:.1f}",
        f"{n['percent']:.0f}",
        eta,
    )


# --- errors and JSON ---------------------------------------------------------------------------


def redact(value: Any, keys: Iterable[str] | None = None) -> Any:
    """A copy of ``value`` whose dict entries with a secret-looking key are masked.

    A key matches when it contains one of ``PGJOBS["REDACT_KEYS"]`` (case-insensitive).
    """
    needles = [k.lower() for k in (conf.get("REDACT_KEYS") if keys is None else keys)]

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: ("********" if any(n in str(k).lower() for n in needles) else walk(x))
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(redact(value), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > MAX_PRETTY_CHARS:
        text = text[:MAX_PRETTY_CHARS] + f"\n… ({len(text) - MAX_PRETTY_CHARS:,} more characters)"
    return format_html('<pre class="pgjobs-pre">{}</pre>', text)


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


def error_summary(text: str | None) -> tuple[str, str]:
    """(exception class, first line of its message) of a stored error; ('', first line) for
    errors that are not tracebacks (lease expired, cancelled …)."""
    if not text:
        return "", ""
    lines = text.splitlines()
    start = max(
        (i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call")),
        default=None,
    )
    if start is not None:
        for ln in lines[start + 1 :]:
            if ln and not ln[0].isspace():
                m = _EXC_LINE.match(ln.strip())
                if m:
                    return m.group(1), (m.group(2) or "")[:200]
                return "", ln[:200]
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    m = _EXC_LINE.match(first)
    if (
        m
        and m.group(2) is not None
        and "." in m.group(1)
        or (m and m.group(1).endswith(("Error", "Exception", "Timeout", "Exit", "Interrupt")))
    ):
        return m.group(1), (m.group(2) or "")[:200]
    return "", first[:200]


def error_line(text: str | None) -> SafeString | str:
    """One line of a stored error for a list: the message first, then the exception's short
    class name ('… card expired <b>PaymentError</b>'); class and whole first line in the title."""
    cls, line = error_summary(text)
    if not cls and not line:
        return ""
    short = cls.rsplit(".", 1)[-1]
    title = f"{cls}: {line}" if cls and line else (cls or line)
    if not line:
        return format_html('<span class="pgjobs-err" title="{}"><b>{}</b></span>', title, short)
    return format_html(
        '<span class="pgjobs-err" title="{}">{}{}</span>',
        title,
        line[:160],
        format_html(" <b>{}</b>", short) if short else "",
    )


def short_type(name: str, limit: int = 30) -> str:
    """A job type cut in the middle, never at its end (where 'invoice_pdf' and 'invoice_csv'
    differ): 'billing.…monthly_invoice_pdf'."""
    if len(name) <= limit:
        return name
    head = name.split(".", 1)[0][:12]
    tail = name[-(limit - len(head) - 2) :]
    cut = re.search(r"[._]", tail[:-8])  # start the tail at a word when one is near
    return f"{head}.…{tail[cut.end() :] if cut else tail}"


def breakable(text: Any) -> SafeString:
    """An identifier (type, queue, worker id) that may wrap only after . _ : (a <wbr> there),
    never inside a word."""
    parts = re.split(r"(?<=[._:])", str(text))
    return format_html_join(mark_safe("<wbr>"), "{}", ((p,) for p in parts if p))
