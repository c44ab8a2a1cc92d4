"""Retry checks its arguments when built: a time the database cannot store never reaches it."""

import math
from datetime import date, datetime, timedelta, timezone

import pytest

from django_pgjobs import Retry

UTC = timezone.utc  # datetime.UTC is Python >= 3.11

AWARE = datetime(2030, 1, 1, tzinfo=UTC)
TEN_YEARS = 10 * 365 * 86400


@pytest.mark.parametrize(
    "at", ["2030-01-01T00:00:00+00:00", date(2030, 1, 1)], ids=["text", "date"]
)
def test_at_that_is_not_a_datetime_is_a_type_error(at):
    with pytest.raises(TypeError, match="aware datetime"):
        Retry(at=at)


def test_naive_at_is_refused():
    with pytest.raises(ValueError, match="aware"):
        Retry(at=datetime(2030, 1, 1))  # noqa: DTZ001 - naive on purpose


@pytest.mark.parametrize("delay", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
def test_delay_must_be_finite(delay):
    with pytest.raises(ValueError, match="finite"):
        Retry(delay=delay)


@pytest.mark.parametrize(
    "delay",
    [1e300, timedelta(days=365 * 11), TEN_YEARS + 1],
    ids=["1e300", "11-years", "ten-years-and-a-second"],
)
def test_delay_is_at_most_ten_years(delay):
    with pytest.raises(ValueError, match="at most"):
        Retry(delay=delay)


def test_max_retry_delay_is_ten_years():
    from django_pgjobs.exceptions import MAX_RETRY_DELAY  # added with the checks

    assert MAX_RETRY_DELAY == TEN_YEARS
    assert Retry(delay=TEN_YEARS).delay == float(TEN_YEARS)


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [
        (timedelta(minutes=5), 300.0),
        (2, 2.0),
        (0.5, 0.5),
        (-3, 0.0),
        (timedelta(seconds=-1), 0.0),
    ],
    ids=["timedelta", "int", "float", "negative-is-now", "negative-timedelta"],
)
def test_valid_delays_are_seconds(delay, seconds):
    retry = Retry(delay=delay)
    assert (retry.delay, retry.at) == (seconds, None)


def test_aware_at_is_kept():
    retry = Retry(at=AWARE)
    assert (retry.at, retry.delay) == (AWARE, None)


def test_delay_and_at_together_are_refused():
    with pytest.raises(ValueError):
        Retry(delay=1, at=AWARE)
