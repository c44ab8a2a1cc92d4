"""SVG charts: escaped, empty-safe, readable scales."""

from datetime import datetime, timedelta, timezone

from django_pgjobs import charts

UTC = timezone.utc  # datetime.UTC is Python >= 3.11


def test_line_chart_escapes_names_and_draws_points():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    svg = charts.line_chart(
        [charts.Series("<script>x</script>", [(t0, 1), (t0 + timedelta(minutes=1), 5)])],
        title="A & B",
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "A &amp; B" in svg and "<polyline" in svg and "00:00" in svg


def test_empty_charts_say_so():
    assert "no data yet" in charts.line_chart([], title="t")
    assert "no data yet" in charts.bar_chart([], title="t")


def test_bar_chart_scales_to_the_largest_value():
    svg = charts.bar_chart(
        [("a<b", [("p50", 10.0), ("p95", None)]), ("c", [("p50", 40.0), ("p95", 80.0)])],
        title="durations",
        unit=" ms",
    )
    assert "a&lt;b" in svg and svg.count('class="pgjobs-bar"') == 4
    assert charts.nice_ticks(80) == [0, 20, 40, 60, 80]
    assert charts.fmt_number(12_500) == "12k" and charts.fmt_number(1_500_000) == "1.5M"
