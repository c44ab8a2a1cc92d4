"""manage.py check: each bad schedule / retention / interval setting has its numbered error."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_pgjobs import handler
from django_pgjobs.checks import check_schedules_and_retention
from django_pgjobs.scheduler import schedule
from tests.support.schedules import entry


def ids() -> list[str]:
    return [e.id for e in check_schedules_and_retention()]


def messages() -> str:
    return "\n".join(e.msg for e in check_schedules_and_retention())


def test_valid_schedules_pass(schedules):
    schedules(
        nightly=entry(cron="0 3 * * *", timezone="Europe/Paris"),
        fast=entry(cron="* * * * * */10", catch_up="all", catch_up_window=600),
        daily=entry(cron="@daily", catch_up="none", queue="reports", priority=5),
    )
    assert ids() == []


@pytest.mark.parametrize(
    ("bad", "check_id", "text"),
    [
        ({"type": "test.echo", "cron": "* * * * *", "color": "red"}, "pgjobs.E101", "color"),
        ({"cron": "61 * * * *"}, "pgjobs.E102", "invalid cron"),
        ({"cron": "* * * *"}, "pgjobs.E102", "invalid cron"),
        ({"cron": "* * * * * * *"}, "pgjobs.E102", "invalid cron"),
        ({"cron": "R 3 * * *"}, "pgjobs.E102", "invalid cron"),
        ({"cron": None}, "pgjobs.E102", "invalid cron"),
        ({"type": "no.such.type"}, "pgjobs.E103", "unknown job type 'no.such.type'"),
        ({"timezone": "Mars/Olympus"}, "pgjobs.E104", "unknown time zone"),
        ({"catch_up": "some"}, "pgjobs.E105", "catch_up must be one of"),
        ({"catch_up": "all", "catch_up_window": -5}, "pgjobs.E105", "catch_up_window"),
        ({"queue": "bad queue"}, "pgjobs.E106", "invalid queue name"),
        ({"priority": 1000}, "pgjobs.E106", "out of range"),
        ({"config": {"x": float("nan")}}, "pgjobs.E106", "NaN"),
    ],
)
def test_each_bad_schedule_has_its_numbered_error(schedules, bad, check_id, text):
    schedules(broken=entry(**bad), fine=entry())
    assert ids() == [check_id]
    assert text in messages() and "'broken'" in messages()
    assert all(e.hint for e in check_schedules_and_retention())


def test_schedules_must_be_a_dict_of_dicts(settings):
    settings.PGJOBS = {**settings.PGJOBS, "SCHEDULES": {"x": "0 3 * * *"}}
    assert ids() == ["pgjobs.E101"]
    settings.PGJOBS = {**settings.PGJOBS, "SCHEDULES": ["x"]}
    assert ids() == ["pgjobs.E101"]


def test_schedule_on_a_function_that_is_no_handler_is_reported(clean_decorators):
    @schedule("* * * * *")
    def lonely(job):
        return None

    assert ids() == ["pgjobs.E107"]
    assert "lonely" in messages() and "exactly one @handler" in messages()


def test_a_name_defined_twice_is_reported(schedules, clean_decorators):
    @schedule("0 * * * *", name="twice")
    @handler("tests.schedules.twice")
    def twice(job):
        return None

    schedules(twice=entry())
    assert ids() == ["pgjobs.E107"]
    assert "defined twice" in messages()


@pytest.mark.parametrize(
    ("retention", "text"),
    [
        ({"COMPLETD": 7}, "unknown key 'COMPLETD'"),
        ({"FAILED": 0}, "days > 0 or None"),
        ({"FAILED": "30"}, "days > 0 or None"),
        ("7", "must be a dict"),
    ],
)
def test_bad_retention_is_e108(settings, retention, text):
    settings.PGJOBS = {**settings.PGJOBS, "RETENTION": retention}
    assert ids() == ["pgjobs.E108"] and text in messages()


def test_retention_none_keeps_forever_and_is_valid(settings):
    settings.PGJOBS = {**settings.PGJOBS, "RETENTION": {"FAILED": None, "COMPLETED": 0.5}}
    assert ids() == []


@pytest.mark.parametrize("key", ["SCHEDULER_INTERVAL", "PRUNE_INTERVAL"])
def test_intervals_must_be_positive(settings, key):
    settings.PGJOBS = {**settings.PGJOBS, key: 0}
    assert ids() == ["pgjobs.E109"]


def test_manage_py_check_fails_on_a_bad_schedule(schedules):
    schedules(broken=entry(cron="every day"))
    with pytest.raises(SystemCheckError, match=r"pgjobs\.E102"):
        call_command("check")
