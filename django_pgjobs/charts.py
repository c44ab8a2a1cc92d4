"""Server-rendered SVG charts for the dashboard: no JavaScript, no CDN, every label escaped.

``line_chart`` draws time series (one polyline per series, a hover title per point);
``bar_chart`` draws horizontal grouped bars (e.g. p50/p95 per job type). Both return markup that
is safe to put in a template: every text that comes from data goes through ``escape``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

PALETTE = ("#2f6fb0", "#c0392b", "#e08e0b", "#2e8b57", "#8e44ad", "#16a085", "#7f8c8d",
           "#d35400")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


@dataclass
class Series:
    name: str
    points: Sequence[tuple[datetime, float]]
    color: str | None = None


def nice_ticks(top: float, count: int = 4, integer: bool = False) -> list[float]:
    """Round tick values from 0 to at least ``top`` (whole steps for counts)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = max(top / count, 1.0) if integer else top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step)
    return [i * step for i in range(n + 1)]


def fmt_number(v: float) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:.1f}M".replace(".0M", "M")
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    if v >= 1000:
        return f"{v / 1000:.1f}k".replace(".0k", "k")
    if v == int(v):
        return str(int(v))
    return f"{v:.1f}"


def _frame(width: int, height: int, title: str, body: list[str], css_class: str) -> SafeString:
    label = escape(title)
    return mark_safe(  # noqa: S308 - every data-derived text below is escaped
        f'<svg class="pgjobs-chart {css_class}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{label}">'
        f"<title>{label}</title>" + "".join(body) + "</svg>"
    )


def _legend(names: Sequence[tuple[str, str]], x: float, y: float) -> list[str]:
    out = []
    for name, color in names:
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14:.1f}" y="{y:.1f}" {FONT}>{escape(name)}</text>')
        x += 24 + 7 * len(name)
    return out


def line_chart(series: Sequence[Series], *, title: str, unit: str = "", width: int = 720,
               height: int = 220, x_range: tuple[datetime, datetime] | None = None,
               integer: bool = True) -> SafeString:
    left, right, top, bottom = 48, 12, 40, 28
    pw, ph = width - left - right, height - top - bottom
    body = [f'<text x="{left}" y="14" {FONT} font-weight="bold">{escape(title)}</text>']
    colored = [(s, s.color or PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)]
    times = sorted({t for s in series for t, _ in s.points})
    if not times:
        body.append(f'<text class="pgjobs-empty" x="{width / 2:.0f}" y="{height / 2:.0f}" '
                    f'text-anchor="middle" {FONT} fill="#888">no data yet</text>')
        return _frame(width, height, title, body, "pgjobs-line")
    first, last = x_range or (times[0], times[-1])
    t0, t1 = first.timestamp(), last.timestamp()
    span = max(t1 - t0, 1.0)
    ticks = nice_ticks(max((v for s in series for _, v in s.points), default=0), integer=integer)
    ymax = ticks[-1] or 1

    def xy(t: datetime, v: float) -> tuple[float, float]:
        return left + pw * (t.timestamp() - t0) / span, top + ph * (1 - v / ymax)

    for tick in ticks:
        y = top + ph * (1 - tick / ymax)
        body.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="#e3e3e3"/><text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" '
                    f'{FONT} fill="#666">{fmt_number(tick)}{escape(unit)}</text>')
    for i in range(5):
        t = datetime.fromtimestamp(t0 + span * i / 4, tz=times[0].tzinfo)
        x = left + pw * i / 4
        body.append(f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle" {FONT} '
                    f'fill="#666">{t:%H:%M}</text>')
    for s, color in colored:
        pts = [xy(t, v) for t, v in s.points]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        body.append(f'<polyline class="pgjobs-series" data-series="{escape(s.name)}" '
                    f'fill="none" stroke="{color}" stroke-width="1.6" points="{path}">'
                    f"<title>{escape(s.name)}</title></polyline>")
        for (t, v), (x, y) in zip(s.points, pts, strict=True):
            if v:
                body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8" fill="{color}">'
                            f"<title>{escape(s.name)} {t:%H:%M}: {fmt_number(v)}"
                            f"{escape(unit)}</title></circle>")
    body += _legend([(s.name, c) for s, c in colored], left, 30)
    return _frame(width, height, title, body, "pgjobs-line")


def bar_chart(rows: Sequence[tuple[str, Sequence[tuple[str, float | None]]]], *, title: str,
              unit: str = "", width: int = 720) -> SafeString:
    """``rows``: [(label, [(series name, value), ...]), ...] drawn as grouped horizontal bars."""
    names = [n for n, _ in rows[0][1]] if rows else []
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    bar_h, gap, left, top = 9, 10, 170, 40
    group_h = bar_h * max(len(names), 1) + gap
    height = top + max(len(rows), 1) * group_h + 26
    body = [f'<text x="8" y="14" {FONT} font-weight="bold">{escape(title)}</text>']
    if not rows:
        body.append(f'<text class="pgjobs-empty" x="{width / 2:.0f}" y="{height / 2 + 8:.0f}" '
                    f'text-anchor="middle" {FONT} fill="#888">no data yet</text>')
        return _frame(width, height, title, body, "pgjobs-bars")
    vmax = max((v or 0 for _, vals in rows for _, v in vals), default=0)
    ticks = nice_ticks(vmax)
    scale = (width - left - 60) / (ticks[-1] or 1)
    for tick in ticks:
        x = left + tick * scale
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{height - 22}" '
                    f'stroke="#eee"/><text x="{x:.1f}" y="{height - 8}" text-anchor="middle" '
                    f'{FONT} fill="#666">{fmt_number(tick)}{escape(unit)}</text>')
    y = top
    for label, values in rows:
        short = label if len(label) <= 26 else label[:25] + "…"
        body.append(f'<text x="{left - 6}" y="{y + group_h / 2:.1f}" text-anchor="end" {FONT}>'
                    f"<title>{escape(label)}</title>{escape(short)}</text>")
        for i, (name, value) in enumerate(values):
            w = (value or 0) * scale
            by = y + i * bar_h
            body.append(f'<rect class="pgjobs-bar" x="{left}" y="{by:.1f}" width="{w:.1f}" '
                        f'height="{bar_h - 1}" fill="{colors.get(name, "#999")}"><title>'
                        f"{escape(label)} {escape(name)}: "
                        f'{"–" if value is None else fmt_number(value)}{escape(unit)}</title></rect>')
        y += group_h
    body += _legend([(n, colors[n]) for n in names], left, 30)
    return _frame(width, height, title, body, "pgjobs-bars")
