"""Handlers of the outcome and reaper-policy tests: each ends its run in one odd way.

``config["case"]`` picks the variant: NUL and lone surrogates cannot travel in a config (enqueue
refuses them), so they live here. No function name, and no source line a traceback shows,
spells out what the tests look for in the stored error (``Retry(at=``, ``backoff`` …).
"""

from datetime import date, datetime

from django_pgjobs import Retry, handler

ERRORS = {"nul": "line 3: 'a\x00b' is not a number", "surrogate": "bad \udc80 byte"}
RESULTS = {"nul": {"line": "a\x00b"}, "surrogate": {"text": "\udc80"}}
RETRY_ARGS = {
    "at-text": {"at": "2030-01-01T00:00:00+00:00"},
    "at-date": {"at": date(2030, 1, 1)},
    "at-naive": {"at": datetime(2030, 1, 1)},  # naive on purpose
    "delay-inf": {"delay": float("inf")},
    "delay-nan": {"delay": float("nan")},
    "delay-huge": {"delay": 1e300},
}
TYPE_DELAY = 3600  # the retry types' own backoff: tells it apart from the global one


@handler("test.outcome.error")
def odd_error(job):
    raise ValueError(ERRORS[job.config["case"]])


@handler("test.outcome.retry", backoff=lambda attempt: TYPE_DELAY)
def odd_retry(job):
    raise Retry(**RETRY_ARGS[job.config["case"]])


@handler("test.outcome.mutated_retry", backoff=lambda attempt: TYPE_DELAY)
def mutated_retry(job):
    exc = Retry(delay=5)
    exc.delay = float("inf")  # valid when built, changed before the raise
    raise exc


@handler("test.outcome.result")
def odd_result(job):
    return RESULTS[job.config["case"]]


@handler("test.outcome.item_error")
def odd_item_error(job):
    job.add_item_error(item=1, error="a\x00b")


@handler("test.outcome.policy_divides_by_zero", backoff=lambda attempt: 1 / 0)
def boom_a(job):
    raise RuntimeError("boom")


@handler("test.outcome.policy_infinite", backoff=lambda attempt: float("inf"))
def boom_b(job):
    raise RuntimeError("boom")


# --- reaper policy (tests/integration/test_reaper_policy.py): never run, only claimed ----------


@handler("test.outcome.reap_fixed", backoff=lambda attempt: 1234)
def reap_fixed(job):
    return None


@handler("test.outcome.reap_base", backoff_base=100, backoff_max=1000, max_attempts=5)
def reap_base(job):
    return None


@handler("test.outcome.reap_capped", backoff_base=100, backoff_max=7)
def reap_capped(job):
    return None
