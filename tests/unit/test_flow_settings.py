"""PGJOBS["QUEUES"]: what a declaration means and the checks that refuse bad ones (E040-E048, E054-E055)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgjobs import InvalidJobOption, flow
from django_pgjobs.checks import check_flow_queues


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("10/s", 10.0), ("600/m", 10.0), ("5/10s", 0.5), ("36/h", 0.01), (2, 2.0), ("1.5/s", 1.5)],
)
def test_rates(text, per_second):
    assert flow.parse_rate(text) == pytest.approx(per_second)


def test_a_full_declaration():
    f = flow.parse_queue(
        {"concurrency": 20, "per_key": 1, "rate": "10/s", "burst": 5, "key": "config.c.id"}
    )
    assert (f.concurrency, f.per_key, f.rate, f.burst, f.key) == (20, 1, 10.0, 5, ("c", "id"))
    assert f.controlled
    assert not flow.parse_queue({"key": "config.c"}).controlled


def ids(declared):
    with override_settings(PGJOBS={"QUEUES": declared}):
        return [e.id for e in check_flow_queues()]


@pytest.mark.parametrize(
    ("declared", "check_id"),
    [
        ({"q": {"rate": "0/s"}}, "pgjobs.E043"),
        ({"q": {"rate": -1}}, "pgjobs.E043"),
        ({"q": {"rate": "ten/s"}}, "pgjobs.E043"),
        ({"q": {"rate": "1/s", "burst": 0}}, "pgjobs.E044"),
        ({"q": {"per_key": 0, "key": "config.c"}}, "pgjobs.E042"),
        ({"q": {"per_key": 1}}, "pgjobs.E047"),
        ({"q": {"per_key": 1, "key": "customer_id"}}, "pgjobs.E045"),
        ({"q": {"concurrency": -1}}, "pgjobs.E041"),
        ({"q": {"concurrency": True}}, "pgjobs.E041"),
        ({"q": {"rate_per_key": "yes", "rate": 1}}, "pgjobs.E046"),
        ({"q": {"ratee": 1}}, "pgjobs.E040"),
        ({"q": {"key": "config.c", "fair": {"default": 0}}}, "pgjobs.E054"),
        ({"q": {"key": "config.c", "fair": {"acme": -3}}}, "pgjobs.E054"),
        ({"q": {"key": "config.c", "fair": {"acme": "3"}}}, "pgjobs.E054"),
        ({"q": {"key": "config.c", "fair": {"acme": True}}}, "pgjobs.E054"),
        ({"q": {"key": "config.c", "fair": {"acme": float("nan")}}}, "pgjobs.E054"),
        ({"q": {"key": "config.c", "fair": {}}}, "pgjobs.E054"),
        ({"q": {"key": "config.c", "fair": 3}}, "pgjobs.E054"),
        ({"q": {"fair": {"default": 1, "acme": 3}}}, "pgjobs.E055"),
        ({"bad name!": {"rate": 1}}, "pgjobs.E048"),
        ({"q": 3}, "pgjobs.E048"),
        (["q"], "pgjobs.E048"),
    ],
)
def test_bad_declarations_are_refused_by_a_numbered_check(declared, check_id):
    assert ids(declared) == [check_id]


def test_good_declarations_pass():
    assert ids({"crm": {"concurrency": 20, "per_key": 1, "rate": "10/s", "key": "config.c"}}) == []
    assert ids({"crm": {"key": "config.c", "fair": {"default": 1, "acme": 3, "b": 0.5}}}) == []


def test_fair_weights_make_a_controlled_queue():
    f = flow.parse_queue({"key": "config.c", "fair": {"acme": 3, "default": 2}})
    assert f.controlled
    assert (f.fair_weights, f.default_weight) == ({"acme": 3.0}, 2.0)
    assert flow.parse_queue({"key": "config.c", "fair": {"acme": 3}}).default_weight == 1.0


def test_a_key_path_reads_the_config():
    assert flow.key_of(("c", "id"), {"c": {"id": 7}}, "q") == "7"
    for config in ({}, {"c": 1}, {"c": {"id": None}}, {"c": {"id": 1.5}}, {"c": {"id": ""}}):
        with pytest.raises(InvalidJobOption):
            flow.key_of(("c", "id"), config, "q")
