"""A workflow's enqueue writes each job's own columns (sent as array literals, not adapted one by
one) and names a refused config by its step, before any SQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from django_pgjobs import InvalidJobConfig, Workflow
from tests.conftest import sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_jobs_columns_and_edges_are_written_as_planned():
    wf = Workflow("columns")
    odd = 'we"ird\\step {x,y} NULL'
    a = wf.add(odd, "test.echo", {"k": 'a"b'}, queue="emails", priority=7, max_attempts=9)
    late = wf.group("late", "test.noop", [{"i": 1}, None], after=a, run_after=timedelta(hours=1))
    wf.add("cb", "test.echo", after=[*late, a], mode="complete")
    run = wf.enqueue()
    rows = sql(
        "SELECT step, queue, priority, max_attempts, status, deps_open, has_dependants,"
        " config->>'k', run_after > now() + interval '50 minutes'"
        " FROM pgjobs_job ORDER BY id"
    )
    assert rows == [
        (odd, "emails", 7, 9, "PENDING", 0, True, 'a"b', False),
        ("late", "default", 0, 5, "WAITING", 1, True, None, True),
        ("late", "default", 0, 5, "WAITING", 1, True, None, True),
        ("cb", "default", 0, 5, "WAITING", 3, False, None, False),
    ]
    edges = sql("SELECT parent_id, child_id, mode FROM pgjobs_dependency ORDER BY 2, 1")
    (root,), members, (cb,) = run[odd], run["late"], run["cb"]
    assert edges == [(root, m, "success") for m in members] + [
        (p, cb, "complete") for p in sorted([root, *members])
    ]


def test_a_refused_config_names_its_step_and_writes_nothing():
    with transaction.atomic():
        wf = Workflow("bad")
        wf.group("ok", "test.noop", [{}] * 3)
        wf.group("parts", "test.noop", [{}, {"x": {1, 2}}])
        with pytest.raises(InvalidJobConfig, match="step 'parts'"):
            wf.enqueue()
    assert sql_one("SELECT count(*) FROM pgjobs_job") == 0
