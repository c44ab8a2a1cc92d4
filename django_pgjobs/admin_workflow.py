"""The admin's workflow page: its steps (state counts, attempts, duration, first jobs) and the
step graph drawn as SVG on the server. One node per step, however many jobs it has: a group of
10,000 is one box with its counts by state. Columns are depths (the longest path from a root).
Reads two statements (sql/workflow_admin.py); the rest are pure functions of their rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from .admin_format import STATUS_COLORS, error_line, redact, span, took_ms
from .models import Workflow
from .sql import workflow_admin as sql
from .status import JobStatus

# The state a step's box shows: the first of these its jobs are in.
SHOWN_FIRST = (
    JobStatus.FAILED,
    JobStatus.RUNNING,
    JobStatus.PENDING,
    JobStatus.WAITING,
    JobStatus.CANCELLED,
    JobStatus.COMPLETED_WITH_ERRORS,
    JobStatus.COMPLETED,
)
WORDS: dict[str, str] = {
    JobStatus.COMPLETED: "done",
    JobStatus.COMPLETED_WITH_ERRORS: "with errors",
}
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 168, 58, 44, 14, 4
NAME_CHARS, LINE_CHARS, RESULT_CHARS = 20, 24, 120


@dataclass(slots=True)
class StepView:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    jobs: list[sql.MemberRow] = field(default_factory=list)
    first_id: int = 0
    attempts: int = 0
    started: datetime | None = None
    finished: datetime | None = None
    depth: int = 0
    row: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def state(self) -> str:
        return next((s for s in SHOWN_FIRST if self.counts.get(s)), JobStatus.PENDING)

    @property
    def more(self) -> int:
        return self.total - len(self.jobs)


def steps_of(rows: list[sql.MemberRow]) -> dict[str, StepView]:
    """The rows of sql.members, by step, in the order of each step's first job."""
    steps: dict[str, StepView] = {}
    for r in rows:
        s = steps.get(r.step)
        if s is None:
            s = steps[r.step] = StepView(r.step, first_id=r.id, attempts=r.step_attempts)
            s.started, s.finished = r.step_started, r.step_finished
        s.counts[r.status] = r.count
        s.first_id = min(s.first_id, r.id)
        if r.listed:
            s.jobs.append(r)
    return steps


def lay_out(steps: dict[str, StepView], edges: list[tuple[str, str, str]]) -> int:
    """Each step's depth (longest path from a root) and row in its column; the columns."""
    parents: dict[str, set[str]] = {name: set() for name in steps}
    for parent, child, _ in edges:
        if parent in steps and child in steps:
            parents[child].add(parent)
    depth: dict[str, int] = {}

    def depth_of(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name not in depth:
            ups = [p for p in parents[name] if p not in seen]  # a cycle cannot be built
            depth[name] = 1 + max((depth_of(p, seen | {name}) for p in ups), default=-1)
        return depth[name]

    rows: dict[int, int] = {}
    for s in sorted(steps.values(), key=lambda s: s.first_id):
        s.depth = depth_of(s.name)
        s.row = rows.get(s.depth, 0)
        rows[s.depth] = s.row + 1
    return max(rows, default=-1) + 1


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def node_line(s: StepView) -> str:
    """The box's second line: a job's state, or a group's size and its two largest states."""
    if s.total == 1:
        return str(WORDS.get(s.state, s.state.lower().replace("_", " ")))
    top = sorted(s.counts.items(), key=lambda kv: (-kv[1], SHOWN_FIRST.index(kv[0])))[:2]
    parts = [f"{n:,} {WORDS.get(st, st.lower())}" for st, n in top]
    return _cut(f"{s.total:,} jobs: " + ", ".join(parts), LINE_CHARS)


def node_title(s: StepView) -> str:
    counts = ", ".join(
        f"{s.counts[st]:,} {st.lower().replace('_', ' ')}" for st in SHOWN_FIRST if s.counts.get(st)
    )
    return f"step {s.name}: {s.total:,} job{'s' if s.total != 1 else ''} ({counts})"


def _xy(s: StepView, tall: bool) -> tuple[int, int]:
    col, row = (s.row, s.depth) if tall else (s.depth, s.row)
    return PAD + col * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y)


def _bar(s: StepView, x: int, y: int) -> SafeString:
    """The box's foot: one segment per state, as wide as its share of the step's jobs."""
    parts, left, width = [], 0.0, NODE_W - 12
    for st in SHOWN_FIRST:
        n = s.counts.get(st, 0)
        if n:
            w = width * n / s.total
            parts.append(
                (f"{x + 6 + left:.1f}", y + NODE_H - 12, f"{max(w, 1.5):.1f}", STATUS_COLORS[st])
            )
            left += w
    return format_html_join("", '<rect x="{}" y="{}" width="{}" height="6" fill="{}"/>', parts)


def _node(s: StepView, x: int, y: int, url: str) -> SafeString:
    color = STATUS_COLORS.get(s.state, "#555")
    return format_html(
        '<a href="{}" class="pgjobs-dag-node"><title>{}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="4" class="pgjobs-dag-box" stroke="{}"/>'
        '<rect x="{}" y="{}" width="5" height="{}" fill="{}"/>'
        '<text x="{}" y="{}" class="pgjobs-dag-name">{}</text>'
        '<text x="{}" y="{}" class="pgjobs-dag-line">{}</text>{}</a>',
        url,
        node_title(s),
        x,
        y,
        NODE_W,
        NODE_H,
        color,
        x,
        y,
        NODE_H,
        color,
        x + 12,
        y + 18,
        _cut(s.name, NAME_CHARS),
        x + 12,
        y + 35,
        node_line(s),
        _bar(s, x, y),
    )


def _edge(p: StepView, c: StepView, mode: str, tall: bool) -> SafeString:
    px, py = _xy(p, tall)
    cx, cy = _xy(c, tall)
    x1: float
    y1: float
    x2: float
    y2: float
    if tall:
        x1, y1, x2, y2 = px + NODE_W / 2, py + NODE_H, cx + NODE_W / 2, cy
    else:
        x1, y1, x2, y2 = px + NODE_W, py + NODE_H / 2, cx, cy + NODE_H / 2
    return format_html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class="pgjobs-dag-edge{}">'
        "<title>{} runs after {} ({})</title></line>",
        x1,
        y1,
        x2,
        y2,
        "" if mode == "success" else " other",
        c.name,
        p.name,
        {"success": "on its success", "failure": "on its failure", "complete": "once it ends"}.get(
            mode, mode
        ),
    )


def dag_svg(
    steps: dict[str, StepView], edges: list[tuple[str, str, str]], urls: dict[str, str], tall: bool
) -> tuple[SafeString, int]:
    """The graph as one <svg> (columns are depths; ``tall``: rows are) and its natural width."""
    cols = max((s.row if tall else s.depth for s in steps.values()), default=0) + 1
    rows = max((s.depth if tall else s.row for s in steps.values()), default=0) + 1
    w = 2 * PAD + cols * NODE_W + (cols - 1) * GAP_X
    h = 2 * PAD + rows * NODE_H + (rows - 1) * GAP_Y
    lines = format_html_join(
        "",
        "{}",
        (
            (_edge(steps[p], steps[c], mode, tall),)
            for p, c, mode in edges
            if p in steps and c in steps
        ),
    )
    nodes = format_html_join(
        "", "{}", ((_node(s, *_xy(s, tall), urls[s.name]),) for s in steps.values())
    )
    label = f"Steps of the workflow, {len(steps)} step{'s' if len(steps) != 1 else ''}, " + (
        "each row a depth" if tall else "each column a depth"
    )
    svg = format_html(
        '<svg class="pgjobs-dag {}" viewBox="0 0 {} {}" width="{}" role="img" '
        'aria-label="{}">{}{}</svg>',
        "pgjobs-dag-tall" if tall else "pgjobs-dag-wide",
        w,
        h,
        w,
        label,
        lines,
        nodes,
    )
    return svg, w


def workflow_state(steps: dict[str, StepView]) -> str:
    """running while a job is active, else failed, cancelled or completed."""
    counts: dict[str, int] = {}
    for s in steps.values():
        for st, n in s.counts.items():
            counts[st] = counts.get(st, 0) + n
    if any(counts.get(st) for st in (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)):
        return "running"
    for st in (JobStatus.FAILED, JobStatus.CANCELLED):
        if counts.get(st):
            return st.lower()
    return "completed" if counts else "empty"


def duration(started: datetime | None, finished: datetime | None, now: datetime) -> str:
    if started is None:
        return "–"
    if finished is None:
        return f"running for {span((now - started).total_seconds())}"
    return span((finished - started).total_seconds())


def job_duration(r: sql.MemberRow, now: datetime) -> str:
    if r.status == JobStatus.RUNNING and r.started_at:
        return f"running for {span((now - r.started_at).total_seconds())}"
    return took_ms(r.duration_ms) if r.duration_ms is not None else "–"


def outcome(r: sql.MemberRow) -> SafeString | str:
    """A failed job's error line, else its result (secrets redacted), cut short."""
    if r.error and r.status != JobStatus.COMPLETED:
        return error_line(r.error) or "–"
    if r.result is None:
        return "–"
    try:
        value = redact(json.loads(r.result))
        text = json.dumps(value, ensure_ascii=False)
    except ValueError:  # cut at TEXT_CHARS: not whole JSON, so not shown (secrets could be)
        return "(long: see the job)"
    if value in (None, {}):  # the column's default: no result
        return "–"
    return format_html("<code>{}</code>", _cut(text, RESULT_CHARS))


def page(wf: Workflow, using: str | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The template's context for one workflow."""
    now = now or timezone.now()
    steps = steps_of(sql.members(wf.pk, using))
    edges = sql.step_edges(wf.pk, using)
    lay_out(steps, edges)
    ordered = sorted(steps.values(), key=lambda s: (s.depth, s.row))
    jobs_url = reverse("admin:django_pgjobs_job_changelist") + f"?workflow={wf.pk}"
    urls = {
        s.name: (
            reverse("admin:django_pgjobs_job_change", args=[s.jobs[0].id])
            if s.total == 1 and s.jobs
            else jobs_url
        )
        for s in ordered
    }
    wide, wide_w = dag_svg(steps, edges, urls, tall=False)
    tall, tall_w = dag_svg(steps, edges, urls, tall=True)
    state = workflow_state(steps)
    return {
        "workflow": wf,
        "state": state,
        "state_color": STATUS_COLORS.get(state.upper(), STATUS_COLORS[JobStatus.CANCELLED]),
        "steps": [_step_row(s, now) for s in ordered],
        "jobs": sum(s.total for s in ordered),
        "jobs_url": jobs_url,
        "dag_wide": wide,
        "dag_tall": tall,
        "dag_style": dag_style(wide_w, tall_w),
        "legend": [(st.lower().replace("_", " "), STATUS_COLORS[st]) for st in SHOWN_FIRST],
    }


def _step_row(s: StepView, now: datetime) -> dict[str, Any]:
    return {
        "name": s.name,
        "total": s.total,
        "single": s.total == 1 and len(s.jobs) == 1,
        "badges": badges(s.counts),
        "attempts": s.attempts,
        "duration": duration(s.started, s.finished, now),
        "more": s.more,
        "jobs": [
            {
                "id": r.id,
                "type": r.type,
                "url": reverse("admin:django_pgjobs_job_change", args=[r.id]),
                "badge": badges({r.status: 1}, count=False),
                "attempts": f"{r.attempts}/{r.max_attempts}",
                "duration": job_duration(r, now),
                "outcome": outcome(r),
            }
            for r in s.jobs
        ],
    }


def badges(counts: dict[str, int], count: bool = True) -> SafeString:
    """Status badges in the admin's colours, a count in each (``count``)."""
    return format_html_join(
        " ",
        '<span class="pgjobs-badge" style="background:{}" title="{}">{}</span>',
        (
            (
                STATUS_COLORS[st],
                st.lower().replace("_", " "),
                (f"{counts[st]:,} " if count else "") + WORDS.get(st, st.lower()),
            )
            for st in SHOWN_FIRST
            if counts.get(st)
        ),
    )


def dag_style(wide: int, tall: int) -> SafeString | str:
    """The wide drawing while it fits at its size, else the tall one (a container query), if
    that one is narrower."""
    if tall >= wide:
        return ""
    width = wide
    return mark_safe(  # noqa: S308 - an int of our own
        f"<style>@container (max-width:{int(width) - 1}px){{.pgjobs-dag-wide{{display:none}}"
        f".pgjobs-dag-tall{{display:block}}}}</style>"
    )
