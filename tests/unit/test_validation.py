"""Config validation happens before any SQL (no database needed)."""

import math
from datetime import datetime

import pytest

from django_pgjobs.exceptions import ConfigTooLarge, InvalidJobConfig, InvalidJobOption
from django_pgjobs.validation import check_priority, check_queue, encode_config


def enc(value, max_bytes=1 << 20, max_depth=64):
    return encode_config(value, max_bytes=max_bytes, max_depth=max_depth)


def test_plain_json_is_encoded_compactly():
    assert enc({"a": [1, 2.5, None, True, "é"]}) == '{"a":[1,2.5,null,true,"é"]}'
    assert enc(None) == "{}"


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"x": math.nan}, "config['x'] is nan"),
        ({"x": [math.inf]}, "config['x'][0] is inf"),
        ({"x": "a\x00b"}, "NUL"),
        ({"x": "\ud800"}, "lone surrogate"),
        ({"when": datetime(2026, 1, 1)}, "datetime.datetime, which is not JSON"),
        ({"obj": object()}, "builtins.object"),
        ({1: "int key"}, "keys must be strings"),
        ({"s": {1, 2}}, "builtins.set"),
    ],
)
def test_non_json_is_refused_with_the_path(config, fragment):
    with pytest.raises(InvalidJobConfig) as info:
        enc(config)
    assert fragment in str(info.value)


def test_config_must_be_an_object():
    with pytest.raises(InvalidJobConfig, match="must be a JSON object"):
        enc([1, 2])


def test_deep_nesting_is_refused_without_recursion_error():
    deep: dict = {}
    cur = deep
    for _ in range(10_000):
        cur["n"] = {}
        cur = cur["n"]
    with pytest.raises(InvalidJobConfig, match="nested deeper than 64 levels"):
        enc(deep)


def test_size_limit_names_both_sizes():
    with pytest.raises(ConfigTooLarge, match=r"over the 1,000-byte limit"):
        enc({"blob": "x" * 2000}, max_bytes=1000)


def test_size_is_measured_in_utf8_bytes():
    enc({"s": "é" * 400}, max_bytes=1000)  # 800 bytes + overhead
    with pytest.raises(ConfigTooLarge):
        enc({"s": "é" * 600}, max_bytes=1000)


@pytest.mark.parametrize("name", ["default", "emails", "a.b-c:d_e", "_x", "q" * 63])
def test_good_queue_names(name):
    assert check_queue(name) == name


@pytest.mark.parametrize("name", ["", "-x", "a b", "q" * 64, "é", "a;drop", None, 5])
def test_bad_queue_names(name):
    with pytest.raises(InvalidJobOption, match="invalid queue name"):
        check_queue(name)


@pytest.mark.parametrize("value", [-101, 101, 1.5, True, "1"])
def test_bad_priorities(value):
    with pytest.raises(InvalidJobOption):
        check_priority(value)
