"""PGJOBS["AGING"]: each bad value has its numbered error (E050-E053); good ones make rules."""

from __future__ import annotations

import pytest

from django_pgjobs import aging
from django_pgjobs.checks import check_aging


def test_good_rules(settings):
    settings.PGJOBS = {"AGING": {"reports": {"every": 60, "max": 10}, "emails": 300}}
    assert check_aging() == []
    assert aging.rules() == [aging.Rule("emails", 300.0, 100), aging.Rule("reports", 60.0, 10)]
    assert aging.rules(["reports"]) == [aging.Rule("reports", 60.0, 10)]
    assert aging.pass_interval(aging.rules()) == 30.0


def test_nothing_by_default(settings):
    settings.PGJOBS = {}
    assert check_aging() == [] and aging.rules() == []


@pytest.mark.parametrize(
    ("value", "check_id", "text"),
    [
        ([("reports", 60)], "pgjobs.E050", "must be a dict"),
        ({"bad queue!": 60}, "pgjobs.E050", "no queue name"),
        ({"reports": 0}, "pgjobs.E051", "'every' must be seconds > 0"),
        ({"reports": -1.5}, "pgjobs.E051", "'every' must be seconds > 0"),
        ({"reports": float("inf")}, "pgjobs.E051", "'every' must be seconds > 0"),
        ({"reports": True}, "pgjobs.E051", "'every' must be seconds > 0"),
        ({"reports": {"max": 5}}, "pgjobs.E051", "'every' must be seconds > 0"),
        ({"reports": {"every": 60, "max": 101}}, "pgjobs.E052", "'max' must be a priority"),
        ({"reports": {"every": 60, "max": 2.5}}, "pgjobs.E052", "'max' must be a priority"),
        ({"reports": {"every": 60, "cap": 5}}, "pgjobs.E053", "unknown keys ['cap']"),
    ],
)
def test_bad_values_are_numbered_errors(settings, value, check_id, text):
    settings.PGJOBS = {"AGING": value}
    errors = check_aging()
    assert [e.id for e in errors] == [check_id] and text in errors[0].msg
    assert errors[0].hint
    assert aging.rules() == []  # a bad setting ages nothing
