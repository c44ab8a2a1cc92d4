"""What a handler produced becomes storable; one retry decision for every failed attempt."""

import math
from datetime import datetime, timezone

import pytest

from django_pgjobs import Fail, Retry
from django_pgjobs.exceptions import JobTimeout, LeaseLost
from django_pgjobs.registry import HandlerSpec
from django_pgjobs.retry import decide
from django_pgjobs.status import JobStatus
from django_pgjobs.worker.storable import storable_json, storable_text

UTC = timezone.utc  # datetime.UTC is Python >= 3.11


@pytest.fixture(autouse=True)
def policy(settings):
    settings.PGJOBS = {"BACKOFF_BASE": 5.0, "BACKOFF_MAX": 3600.0, "BACKOFF_JITTER": 0.1}


def spec(**policy):
    return HandlerSpec(type="t", func=lambda job: None, **policy)


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("plain", "plain"),
        ("a\x00b", "a\\x00b"),
        ("bad \udc80 byte", "bad \\udc80 byte"),
        ("café ☕", "café ☕"),
    ],
)
def test_text_is_stored_with_nul_and_lone_surrogates_escaped(text, stored):
    assert storable_text(text) == stored
    storable_text(text).encode("utf-8")  # PostgreSQL's encoding takes it


def test_json_strings_and_keys_are_escaped_and_the_rest_kept():
    value, text = storable_json({"a\x00": ["x\udc80", 1, None, {"ok": "☕"}]})
    assert value == {"a\\x00": ["x\\udc80", 1, None, {"ok": "☕"}]}
    assert "\\u0000" not in text
    same = {"line": "fine", "n": 2}
    assert storable_json(same)[0] is same  # nothing to escape: no copy


def test_json_that_is_not_json_is_refused_as_json_dumps_would():
    with pytest.raises(ValueError):
        storable_json({"x": math.nan})
    with pytest.raises(TypeError):
        storable_json({"x": object()})


@pytest.mark.parametrize(
    ("exc", "status", "note"),
    [
        (Fail("no"), JobStatus.FAILED, "failed"),
        (LeaseLost("gone"), JobStatus.FAILED, "lease_lost"),
        (ValueError("x"), JobStatus.PENDING, "retry"),
        (JobTimeout("slow"), JobStatus.PENDING, "retry"),
        (None, JobStatus.PENDING, "retry"),  # a lease that expired
    ],
)
def test_decide_one_rule_for_every_failed_attempt(exc, status, note):
    d = decide(spec(backoff_base=10), 1, 3, exc, rand=lambda: 0.5)
    assert (d.status, d.note) == (status, note)
    if status == JobStatus.PENDING:
        assert d.delay == 10.0 and d.problem is None


def test_decide_fails_the_last_attempt_whatever_the_error():
    assert decide(spec(), 3, 3, ValueError()).note == "attempts_exhausted"
    assert decide(spec(), 3, 3, None).status == JobStatus.FAILED


def test_decide_takes_the_handlers_retry_time():
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert decide(spec(), 1, 3, Retry(at=at)).run_at == at
    assert decide(spec(), 1, 3, Retry(delay=7)).delay == 7.0


def test_a_retry_spoiled_after_it_was_raised_falls_back_to_the_backoff():
    exc = Retry(delay=5)
    exc.delay = math.inf
    d = decide(spec(backoff_base=10), 1, 3, exc, rand=lambda: 0.5)
    assert d.delay == 10.0 and "Retry(delay=inf)" in d.problem


@pytest.mark.parametrize("backoff", [lambda a: 1 / 0, lambda a: math.inf, lambda a: "5"])
def test_a_broken_backoff_falls_back_to_the_exponential_one(backoff):
    d = decide(spec(backoff=backoff), 1, 3, ValueError(), rand=lambda: 0.5)
    assert d.status == JobStatus.PENDING and d.delay == 5.0  # BACKOFF_BASE
    assert "backoff(1) failed" in d.problem


def test_a_reaped_job_gets_its_types_policy_and_jitter():
    delays = {decide(spec(backoff_base=100), 1, 5).delay for _ in range(20)}
    assert all(90 <= d <= 110 for d in delays) and len(delays) > 1
    assert decide(spec(backoff=lambda attempt: 1234), 1, 5).delay == 1234.0
