"""Tick arithmetic of a schedule (no database): cron, time zones, DST."""

from datetime import datetime
from datetime import timezone as _timezone
from zoneinfo import ZoneInfo

from django_pgjobs.scheduler import ScheduleSpec, _due
from tests.support.schedules import utc

UTC = _timezone.utc  # datetime.UTC is Python >= 3.11

PARIS = ZoneInfo("Europe/Paris")


def spec(cron: str, tz: str = "UTC", **kw: object) -> ScheduleSpec:
    return ScheduleSpec(name="s", type="test.echo", cron=cron, timezone=tz, **kw)


def paris(*args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=PARIS, fold=fold).astimezone(UTC)


def test_nightly_at_three_in_paris_follows_the_local_clock_across_dst():
    s = spec("0 3 * * *", "Europe/Paris")
    assert s.next_after(utc(2025, 1, 15, 12, 0)) == utc(2025, 1, 16, 2, 0)  # winter: UTC+1
    assert s.next_after(utc(2025, 7, 15, 12, 0)) == utc(2025, 7, 16, 1, 0)  # summer: UTC+2


def test_a_wall_time_repeated_when_dst_ends_fires_once():
    s = spec("30 2 * * *", "Europe/Paris")
    first = s.next_after(paris(2025, 10, 25, 12, 0))
    assert first == paris(2025, 10, 26, 2, 30)  # the first 02:30 (UTC+2)
    assert s.next_after(first) == paris(2025, 10, 27, 2, 30)  # not the second 02:30 (UTC+1)
    assert s.latest_at_or_before(paris(2025, 10, 26, 2, 45, fold=1)) == first


def test_an_hourly_wildcard_schedule_runs_at_each_real_instant_of_the_repeated_hour():
    s = spec("*/30 * * * *", "Europe/Paris")
    ticks = list(s.ticks_between(paris(2025, 10, 26, 1, 45), paris(2025, 10, 26, 3, 0), 10))
    assert ticks == [
        paris(2025, 10, 26, 2, 0),
        paris(2025, 10, 26, 2, 30),
        paris(2025, 10, 26, 2, 0, fold=1),
        paris(2025, 10, 26, 2, 30, fold=1),
        paris(2025, 10, 26, 3, 0),
    ]


def test_a_wall_time_skipped_when_dst_starts_fires_just_after_the_change():
    s = spec("30 2 * * *", "Europe/Paris")
    assert s.next_after(paris(2025, 3, 29, 12, 0)) == paris(2025, 3, 30, 3, 0)
    assert s.next_after(paris(2025, 3, 30, 3, 0)) == paris(2025, 3, 31, 2, 30)


def test_ticks_are_instants_whatever_the_zone_of_the_input():
    s = spec("*/15 * * * *")
    t = utc(2030, 1, 1, 10, 15)
    assert s.is_tick(t) and s.is_tick(t.astimezone(PARIS))
    assert not s.is_tick(utc(2030, 1, 1, 10, 16))
    assert s.next_after(t) == utc(2030, 1, 1, 10, 30)
    assert s.latest_at_or_before(t) == t


def test_a_sixth_field_gives_seconds():
    s = spec("* * * * * */20")
    assert list(s.ticks_between(utc(2030, 1, 1, 0, 0, 0), utc(2030, 1, 1, 0, 1, 0), 10)) == [
        utc(2030, 1, 1, 0, 0, 0),
        utc(2030, 1, 1, 0, 0, 20),
        utc(2030, 1, 1, 0, 0, 40),
        utc(2030, 1, 1, 0, 1, 0),
    ]


def test_catch_up_latest_fires_only_the_most_recent_missed_tick():
    ticks, skipped, resume = _due(spec("0 * * * *"), utc(2030, 1, 1, 8), utc(2030, 1, 1, 12, 30))
    assert ticks == [utc(2030, 1, 1, 12)] and skipped == 4 and resume == utc(2030, 1, 1, 13)


def test_catch_up_none_drops_ticks_later_than_the_window():
    late = _due(spec("0 * * * *", catch_up="none"), utc(2030, 1, 1, 8), utc(2030, 1, 1, 12, 30))
    assert late == ([], 5, utc(2030, 1, 1, 13))
    on_time = _due(
        spec("0 * * * *", catch_up="none"), utc(2030, 1, 1, 12), utc(2030, 1, 1, 12, 0, 40)
    )
    assert on_time == ([utc(2030, 1, 1, 12)], 0, utc(2030, 1, 1, 13))


def test_catch_up_all_fires_every_tick_inside_the_window_oldest_first():
    s = spec("0 * * * *", catch_up="all", catch_up_window=3 * 3600)
    ticks, skipped, resume = _due(s, utc(2030, 1, 1, 6), utc(2030, 1, 1, 12, 30))
    assert ticks == [utc(2030, 1, 1, 10), utc(2030, 1, 1, 11), utc(2030, 1, 1, 12)]
    assert skipped == 4  # 06:00 .. 09:00 are older than 3 h
    assert resume == utc(2030, 1, 1, 13)


def test_catch_up_all_works_off_a_long_backlog_over_several_passes():
    s = spec("* * * * * *", catch_up="all", catch_up_window=3600)
    ticks, skipped, resume = _due(s, utc(2030, 1, 1, 0), utc(2030, 1, 1, 0, 30))
    assert len(ticks) == 1000 and skipped == 0
    assert resume == ticks[-1].replace(second=ticks[-1].second + 1)  # the rest next time
