"""How the admin writes values (admin_format), the charts' log scale and the state tabs'
estimated counts (admin_counts)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection

from django_pgjobs import admin_counts, charts
from django_pgjobs.admin_format import breakable, relative, short_type, span, when
from tests.support.admin import make_job

UTC = timezone.utc  # datetime.UTC is Python >= 3.11
NOW = datetime(2026, 12, 1, 21, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0123, "12 ms"),
        (1.25, "1.2 s"),
        (12.4, "12 s"),
        (64, "1 min 4 s"),
        (120, "2 min"),
        (3 * 3600 + 125, "3 h 2 min"),
        (86_400 * 2 + 3600 * 5, "2 d 5 h"),
    ],
)
def test_durations_in_the_two_largest_units(seconds, text):
    assert span(seconds) == text


def test_relative_times_tell_jobs_apart_and_carry_the_exact_time():
    assert ">12 s ago</time>" in relative(NOW - timedelta(seconds=12), NOW)
    assert ">13 s ago</time>" in relative(NOW - timedelta(seconds=13), NOW)
    assert ">in 3 min 4 s</time>" in relative(NOW + timedelta(seconds=184), NOW)
    assert 'datetime="2026-12-01T20:59:48+00:00"' in relative(NOW - timedelta(seconds=12), NOW)


def test_one_date_format_locale_aware_with_seconds_and_iso_title():
    html = when(NOW)
    assert html == (
        '<time datetime="2026-12-01T21:00:00+00:00" '
        'title="2026-12-01T21:00:00+00:00">Dec. 1, 2026, 21:00:00</time>'
    )
    assert when("2026-12-01T21:00:00+00:00") == html  # history entries store ISO text
    assert when(None) == "–"


def test_bars_go_on_a_log_scale_only_when_one_row_would_flatten_the_rest():
    flat = charts.bar_chart([("fast", [("p50", 40.0)]), ("slow", [("p50", 90_000.0)])], title="d")
    assert "pgjobs-log" in flat and "log scale" in flat
    widths = [float(w) for w in re.findall(r"width:([\d.]+)%", flat)]
    assert widths[0] > 20  # the fast type is still visible
    even = charts.bar_chart([("a", [("p50", 40.0)]), ("b", [("p50", 90.0)])], title="d")
    assert "pgjobs-log" not in even


@pytest.mark.django_db
def test_state_tabs_count_exactly_when_cheap_and_estimate_from_statistics(monkeypatch):
    for _ in range(30):
        make_job("COMPLETED")
    make_job("FAILED")
    tabs = {t.state: t for t in admin_counts.state_tabs()}
    assert (tabs["COMPLETED"].count, tabs["COMPLETED"].estimated) == (30, False)
    with connection.cursor() as cur:
        cur.execute("ANALYZE pgjobs_job")
    monkeypatch.setattr(admin_counts, "EXACT_UP_TO", 5)
    tabs = {t.state: t for t in admin_counts.state_tabs()}
    assert tabs["COMPLETED"].estimated and tabs["COMPLETED"].shown.startswith("≈ ")
    assert 20 <= tabs["COMPLETED"].count <= 40
    assert (tabs["FAILED"].count, tabs["FAILED"].estimated) == (1, False)
    monkeypatch.setattr(admin_counts, "SCAN_UP_TO_ROWS", 10)  # a "big" table: no full scan
    tabs = {t.state: t for t in admin_counts.state_tabs()}
    assert tabs["COMPLETED"].estimated and not tabs["FAILED"].estimated


def test_long_types_are_cut_in_the_middle_and_identifiers_wrap_only_at_separators():
    assert short_type("test.echo") == "test.echo"
    assert (
        short_type("billing.invoices.generate_monthly_invoice_pdf")
        == "billing.…monthly_invoice_pdf"
    )
    assert len(short_type("x" * 80)) <= 30
    assert str(breakable("vm:44.a_b</c>")) == "vm:<wbr>44.<wbr>a_<wbr>b&lt;/c&gt;"


def test_an_instant_run_took_under_a_millisecond_not_zero():
    from django_pgjobs.admin_format import took_ms

    assert (took_ms(0), took_ms(0.4), took_ms(12), took_ms(None)) == (
        "< 1 ms",
        "< 1 ms",
        "12 ms",
        "–",
    )


def test_a_schedules_next_run_is_in_its_own_zone_named_and_relative():
    from django_pgjobs.admin_format import cron_line, in_zone

    html = str(
        in_zone(
            datetime(2026, 12, 2, 2, 0, tzinfo=UTC),
            "Europe/Paris",
            now=datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        )
    )
    assert ">Dec. 2, 2026, 03:00 CET</time>" in html and ">in 18 h</span>" in html
    assert 'title="2026-12-02T02:00:00+00:00"' in html
    assert "03:00 UTC" not in html and ", 02:00 UTC" in str(
        in_zone(datetime(2026, 12, 2, 2, 0, tzinfo=UTC), "No/Such_Zone", now=NOW)
    )
    assert "catch up" not in str(cron_line("0 3 * * *", "UTC", "latest")).split('">', 1)[1]
    assert "· catch up: all" in str(cron_line("0 3 * * *", "UTC", "all"))


def _lab(hex_colour: str) -> tuple[float, float, float]:
    def lin(c: float) -> float:
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (lin(int(hex_colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(v: float) -> float:
        return v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_chart_series_colours_are_far_enough_apart_to_tell_apart():
    """Issue 30.10: two queues of the depth chart were drawn in near-identical greens."""
    import itertools
    import math

    pairs = itertools.combinations(charts.PALETTE, 2)
    closest = min((math.dist(_lab(a), _lab(b)), a, b) for a, b in pairs)
    assert closest[0] >= charts.MIN_DELTA_E, closest


def test_bar_labels_are_cut_in_the_middle_keeping_the_end():
    html = str(
        charts.bar_chart(
            [
                ("billing.invoices.generate_monthly_invoice_pdf", [("p50", 5)]),
                ("billing.invoices.generate_monthly_invoice_csv", [("p50", 7)]),
            ],
            title="t",
        )
    )
    assert "…invoice_pdf</div>" in html and "…invoice_csv</div>" in html
    assert 'title="billing.invoices.generate_monthly_invoice_pdf"' in html
