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
        # what json.dumps accepts silently: the checks after it must still catch them
        ({"a": {2: "nested int key"}}, "keys must be strings"),
        ({None: 1}, "keys must be strings"),
        ({"a": ["x", "b\x00"]}, "config['a'][1] contains a NUL"),
        ({"a": {"\ud800": 1}}, "lone surrogate"),
        ({"n": 10**5000}, "thousands of digits"),
    ],
)
def test_non_json_is_refused_with_the_path(config, fragment):
    with pytest.raises(InvalidJobConfig) as info:
        enc(config)
    assert fragment in str(info.value)


def test_text_that_only_looks_like_nul_is_kept():
    assert enc({"s": "\\u0000"}) == '{"s":"\\\\u0000"}'
    assert enc({"s": "{[{["}) == '{"s":"{[{["}'


def test_nesting_just_over_the_limit_is_refused():
    config: dict = {"a": []}
    for _ in range(64):
        config = {"a": config}
    with pytest.raises(InvalidJobConfig, match="nested deeper than 64 levels"):
        enc(config)
    assert enc(config, max_depth=70)


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


def test_bulk_encoding_matches_one_by_one():
    from django_pgjobs.validation import encode_configs

    flat = [{"i": i, "s": "é"} for i in range(3)] + [None]
    assert encode_configs(flat, max_bytes=1000, max_depth=64) == (
        "[" + ",".join(enc(c) for c in flat) + "]"
    )
    mixed = [{"a": {"b": [1]}}, {"s": "{[["}, {}]
    assert encode_configs(mixed, max_bytes=1000, max_depth=64) == (
        "[" + ",".join(enc(c) for c in mixed) + "]"
    )


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"x": math.nan}, "is nan"),
        ({1: 2}, "keys must be strings"),
        ({"x": "\x00"}, "NUL"),
        ({"blob": "x" * 600}, "over the 500-byte limit"),
        ([1], "must be a JSON object"),
    ],
)
def test_bulk_encoding_names_the_refused_config(bad, fragment):
    from django_pgjobs.validation import encode_configs

    with pytest.raises(InvalidJobConfig, match=r"^configs\[12\]: ") as info:
        encode_configs([{"i": 0}, {"i": 1}, bad], max_bytes=500, max_depth=64, first=10)
    assert fragment in str(info.value)
