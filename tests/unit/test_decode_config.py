"""The worker's decoding of a claimed job's config (jsonb sent as text)."""

import json

import pytest

from django_pgjobs.validation import decode_config


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        '{"i": 1}',
        '{"a": [1, 2.5, -3e-7, true, false, null], "b": {"c": "d"}}',
        '{"é": "\\u00e9\\ud83d\\ude00", "tab": "a\\tb", "q": "\\""}',
        '{"big": 123456789012345678901234567890, "neg": -0.0}',
        '{"k": 1, "k": 2}',  # jsonb keeps the last; so does json
        ' {"padded": true} ',  # not jsonb's output, but loads() takes it: so do we
    ],
)
def test_a_config_decodes_as_json_loads_would(text):
    assert decode_config(text) == (json.loads(text), None)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("[1, 2]", "config is a JSON list, not an object"),
        ('"text"', "config is a JSON str, not an object"),
        ("3", "config is a JSON int, not an object"),
        ('{"n": 1' + "0" * 5000 + "}", "config cannot be decoded (Exceeds the limit"),
        (
            '{"x": ' + "[" * 10_000 + "]" * 10_000 + "}",
            "config cannot be decoded (maximum recursion",
        ),
        ('{"a": 1} {"b": 2}', "config cannot be decoded (Extra data"),
        ('{"a": ', "config cannot be decoded (Expecting value"),
    ],
)
def test_a_config_that_cannot_be_handed_over_says_why(text, reason):
    config, error = decode_config(text)
    assert config == {}
    assert error.startswith(reason), error
    assert error.endswith("the job was not run (was it written with raw SQL?)")
