"""The dashboard's charts, server-rendered: no JavaScript, no CDN, every label escaped.

Text is HTML (title, legend, axis labels), so it keeps its pixel size whatever the card's width
and takes the admin's colours in light and dark mode; only the lines are SVG, stretched to the
plot area with strokes that do not scale. ``line_chart`` draws time series, ``bar_chart``
horizontal grouped bars (e.g. p50/p95 per job type), on a log scale when one row would
otherwise flatten the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Series colours at least MIN_DELTA_E apart (CIE76 in Lab; tests check it): the teal that once
# followed the green read as the same colour.
PALETTE = ("#3b7dc4", "#d64a3a", "#d98a10", "#2e9a5e", "#9b59b6", "#17becf", "#8a9597", "#d6409f")
MIN_DELTA_E = 25
PLOT_W, PLOT_H = 1000, 200  # the SVG's user space; stretched to the plot area
LOG_RATIO = 30  # bars go on a log scale when the largest value is this many times the smallest


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


def _figure(kind: str, title: str, body: list[str]) -> SafeString:
    label = escape(title)
    return mark_safe(  # noqa: S308 - every data-derived text below is escaped
        f'<figure class="pgjobs-chart {kind}" role="img" aria-label="{label}">'
        f'<figcaption class="pgjobs-chart-title">{label}</figcaption>' + "".join(body) + "</figure>"
    )


def _legend(names: Sequence[tuple[str, str]]) -> str:
    items = "".join(
        f'<span class="pgjobs-legend-item"><i style="background:{c}"></i>{escape(n)}</span>'
        for n, c in names
    )
    return f'<div class="pgjobs-legend">{items}</div>'


def _empty() -> str:
    return '<p class="pgjobs-empty">no data yet</p>'


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    unit: str = "",
    x_range: tuple[datetime, datetime] | None = None,
    integer: bool = True,
) -> SafeString:
    colored = [(s, s.color or PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)]
    times = sorted({t for s in series for t, _ in s.points})
    if not times:
        return _figure("pgjobs-line", title, [_empty()])
    first, last = x_range or (times[0], times[-1])
    t0, span = first.timestamp(), max(last.timestamp() - first.timestamp(), 1.0)
    ticks = nice_ticks(max((v for s in series for _, v in s.points), default=0), integer=integer)
    ymax = ticks[-1] or 1

    def xy(t: datetime, v: float) -> tuple[float, float]:
        return PLOT_W * (t.timestamp() - t0) / span, PLOT_H * (1 - v / ymax)

    svg = [
        f'<line class="pgjobs-grid-line" x1="0" x2="{PLOT_W}" y1="{PLOT_H * (1 - t / ymax):.1f}"'
        f' y2="{PLOT_H * (1 - t / ymax):.1f}" vector-effect="non-scaling-stroke"/>'
        for t in ticks
    ]
    for s, color in colored:
        pts = [xy(t, v) for t, v in s.points]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        svg.append(
            f'<polyline class="pgjobs-series" data-series="{escape(s.name)}" fill="none" '
            f'stroke="{color}" stroke-width="1.8" vector-effect="non-scaling-stroke" '
            f'points="{path}"><title>{escape(s.name)}</title></polyline>'
        )
        svg += [
            f'<path d="M{x:.1f} {y:.1f}h0" stroke="{color}" stroke-width="5" '
            f'stroke-linecap="round" vector-effect="non-scaling-stroke"><title>'
            f"{escape(s.name)} {t:%H:%M}: {fmt_number(v)}{escape(unit)}</title></path>"
            for (t, v), (x, y) in zip(s.points, pts, strict=True)
            if v
        ]
    y_labels = "".join(
        f'<span style="bottom:{100 * t / ymax:.2f}%">{fmt_number(t)}{escape(unit)}</span>'
        for t in ticks
    )
    x_labels = "".join(
        f"<span>{datetime.fromtimestamp(t0 + span * i / 4, tz=times[0].tzinfo):%H:%M}</span>"
        for i in range(5)
    )
    return _figure(
        "pgjobs-line",
        title,
        [
            _legend([(s.name, c) for s, c in colored]),
            f'<div class="pgjobs-plot"><div class="pgjobs-yaxis">{y_labels}</div>'
            f'<svg viewBox="0 0 {PLOT_W} {PLOT_H}" preserveAspectRatio="none" aria-hidden="true">'
            + "".join(svg)
            + f'</svg></div><div class="pgjobs-xaxis">{x_labels}</div>',
        ],
    )


def short_label(label: str, limit: int = 22) -> str:
    """A long row label cut in the middle (the end tells 'invoice_pdf' from 'invoice_csv')."""
    from .admin_format import short_type

    return short_type(label, limit)


def bar_position(value: float | None, vmax: float, vmin: float, log: bool) -> float:
    """A bar's length in percent of the track."""
    if not value or value <= 0 or vmax <= 0:
        return 0.0
    if not log:
        return 100 * value / vmax
    low = math.log10(vmin) - 1  # a decade below the smallest value: every bar shows
    return max(2.0, 100 * (math.log10(value) - low) / (math.log10(vmax) - low))


def bar_chart(
    rows: Sequence[tuple[str, Sequence[tuple[str, float | None]]]],
    *,
    title: str,
    unit: str = "",
    fmt: Callable[[float], str] | None = None,
) -> SafeString:
    """``rows``: [(label, [(series name, value), ...]), ...] drawn as grouped horizontal bars,
    each with its value written beside it."""
    if not rows:
        return _figure("pgjobs-bars", title, [_empty()])
    names = [n for n, _ in rows[0][1]]
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    values = [v for _, vals in rows for _, v in vals if v]
    vmax, vmin = max(values, default=0), min(values, default=0)
    log = bool(values) and vmin > 0 and vmax / vmin >= LOG_RATIO
    out = [_legend([(n, colors[n]) for n in names])]
    if log:
        out.append('<p class="pgjobs-scale-note">log scale: each step is ×10</p>')
    for label, vals in rows:
        bars = "".join(
            f'<div class="pgjobs-bar-line"><span class="pgjobs-bar-area"><span class="pgjobs-bar"'
            f' style="width:{bar_position(v, vmax, vmin, log):.2f}%;background:'
            f'{colors.get(n, "#999")}" title="{escape(label)} {escape(n)}"></span></span>'
            f'<span class="pgjobs-bar-value">'
            f"{escape(n)} {'–' if v is None else escape(fmt(v) if fmt else fmt_number(v))}"
            f"{'' if fmt else escape(unit)}</span></div>"
            for n, v in vals
        )
        out.append(
            f'<div class="pgjobs-bar-row"><div class="pgjobs-bar-label" '
            f'title="{escape(label)}">{escape(short_label(label))}</div>'
            f'<div class="pgjobs-bar-track">{bars}</div></div>'
        )
    return _figure("pgjobs-bars" + (" pgjobs-log" if log else ""), title, out)
