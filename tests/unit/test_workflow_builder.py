"""The workflow builder checks a workflow whole before any SQL (no database here: a refused
workflow never reaches one)."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from django_pgjobs import Batch, InvalidJobOption, UnknownJobType, Workflow, chain, chord, job


def plan(wf):
    p = wf._plan()
    configs = [c for array in p.configs for c in json.loads(array)]
    columns = zip(
        p.types,
        p.queues,
        p.priorities,
        p.max_attempts,
        p.delays,
        p.steps,
        p.deps,
        [bool(b) for b in p.dependants],
        configs,
        strict=True,
    )
    names = ("type", "queue", "priority", "max_attempts", "delay", "step", "deps", "dependants")
    records = [{**dict(zip(names, r, strict=False)), "config": r[8]} for r in columns]
    return records, list(zip(p.parents, p.children, p.modes, strict=True))


def test_a_dag_plans_its_counters_and_edges():
    wf = Workflow("import")
    a = wf.add("fetch", "test.echo", {"day": 1})
    parts = wf.group("parse", "test.echo", [{"p": i} for i in range(3)], after=[a])
    wf.add("report", "test.echo", after=parts, mode="complete")
    records, edges = plan(wf)
    assert [(r["step"], r["deps"], r["dependants"]) for r in records] == [
        ("fetch", 0, True),
        ("parse", 1, True),
        ("parse", 1, True),
        ("parse", 1, True),
        ("report", 3, False),
    ]
    assert edges == [(0, 1, "success"), (0, 2, "success"), (0, 3, "success")] + [
        (i, 4, "complete") for i in (1, 2, 3)
    ]
    assert records[1]["config"] == {"p": 0}


def test_the_helpers_build_chains_chords_and_batches():
    _, edges = plan(chain(("test.echo", {}), job("test.echo"), ("test.echo",)))
    assert edges == [(0, 1, "success"), (1, 2, "success")]
    _, edges = plan(chord([("test.echo", {})] * 2, ("test.echo", {})))
    assert edges == [(0, 2, "success"), (1, 2, "success")]
    b = Batch([("test.echo", {})] * 2, on_failure=("test.echo", {}), on_complete=("test.echo", {}))
    _, edges = plan(b)
    assert {(c, m) for _, c, m in edges} == {(2, "failure"), (3, "complete")}


def test_a_cycle_is_refused_naming_its_steps():
    wf = Workflow("loop")
    wf.add("a", "test.echo", after="c")
    wf.add("b", "test.echo", after="a")
    wf.add("c", "test.echo", after="b")
    with pytest.raises(InvalidJobOption, match=r"cycle in the workflow's steps: a -> c -> b -> a"):
        wf.enqueue()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda wf: wf.add("a", "test.echo", after="nope"), "unknown step 'nope'"),
        (lambda wf: [wf.add("a", "test.echo"), wf.add("a", "test.echo")], "duplicate step 'a'"),
        (lambda wf: wf.add("a", "test.echo", unique_key="k"), "cannot have a unique_key"),
        (lambda wf: wf.add("a", "test.echo", mode="sometimes"), "mode must be one of"),
        (lambda wf: wf.add("a", "test.echo", after=12), "existing jobs cannot be dependencies"),
        (lambda wf: wf.add("a", "test.echo", debounce=3), "unknown options"),
        (lambda wf: wf.add("a", "test.echo", priority=10**6), "priority"),
        (lambda wf: None, "has no jobs"),
    ],
)
def test_bad_input_is_refused_before_any_sql(build, message):
    wf = Workflow("bad")
    with pytest.raises(InvalidJobOption, match=message):
        build(wf)
        wf.enqueue()  # no database in this tier: an error here is raised before any SQL


def test_an_unknown_type_or_policy_is_refused():
    wf = Workflow("t")
    wf.add("a", "no.such.type")
    with pytest.raises(UnknownJobType):
        wf.enqueue()
    with pytest.raises(InvalidJobOption, match="on_failure must be one of"):
        Workflow("t", on_failure="shrug")


@override_settings(PGJOBS={"WORKFLOW_MAX_JOBS": 10})
def test_over_workflow_max_jobs_is_refused():
    wf = Workflow("wide")
    wf.group("m", "test.echo", [{}] * 11)
    with pytest.raises(InvalidJobOption, match=r"11 jobs, over PGJOBS\['WORKFLOW_MAX_JOBS'\]"):
        wf.enqueue()
