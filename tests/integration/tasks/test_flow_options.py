"""Unique windows and debounce for @task functions: declared on @task(...) or per call with
.using(...); bad values are InvalidTask (docs/flow-control.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_pgjobs.models import Job, UniqueWindow
from django_pgjobs.tasks_api import InvalidTask, TaskResultDoesNotExist
from django_pgjobs.testing import run_jobs
from tests.conftest import sql
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db


def job_of(result):
    return Job.objects.get(pk=int(result.id))


def test_debounced_calls_of_a_key_merge_into_one_run_with_the_last_arguments():
    first = t.reindex.enqueue(7, version=1)
    again = t.reindex.enqueue(7, version=2)
    other = t.reindex.enqueue(8)
    assert again.id == first.id and other.id != first.id
    job = job_of(first)
    assert job.debounce_key == "doc:7" and job.config["kwargs"] == {"version": 2}
    sql("UPDATE pgjobs_job SET run_after = now()")
    run_jobs()
    assert t.reindex.get_result(first.id).return_value == {"doc": 7, "version": 2}


def test_using_sets_a_unique_window_per_call():
    windowed = t.add.using(unique_key="sum", unique_for=timedelta(hours=1))
    first = windowed.enqueue(1, 2)
    assert UniqueWindow.objects.get(key="task:tests.testapp.tasks.add|sum").job_id == int(first.id)
    run_jobs()
    again = windowed.enqueue(1, 2)
    assert again.id == first.id  # finished, inside its window: its result
    sql("DELETE FROM pgjobs_job WHERE id = %s", [int(first.id)])  # as the pruner would
    with pytest.raises(TaskResultDoesNotExist, match="pruned"):
        windowed.enqueue(1, 2)


def test_using_sets_a_debounce_per_call():
    debounced = t.add.using(debounce=30, debounce_key="k", debounce_max_wait=60)
    assert debounced.enqueue(1, 1).id == debounced.enqueue(2, 2).id
    assert job_of(debounced.enqueue(3, 3)).config["args"] == [3, 3]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_for": 60}, "unique_for needs a unique_key"),
        ({"unique_key": "k", "unique_for": 0}, "unique_for must be > 0"),
        ({"debounce": -1, "debounce_key": "k"}, "debounce must be > 0"),
        ({"debounce": 30, "debounce_key": "k", "unique_key": "u"}, "combined with unique_key"),
        ({"debounce": 30, "debounce_key": "k", "run_after": timedelta(seconds=5)}, "run_after"),
        ({"debounce": 30, "debounce_key": ""}, "debounce_key must be a non-empty string"),
    ],
)
def test_bad_flow_options_are_invalid_tasks(options, message):
    with pytest.raises(InvalidTask, match=message):
        t.add.using(**options).enqueue(1, 2)
    assert Job.objects.count() == 0
