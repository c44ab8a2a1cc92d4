"""Bad input, wherever it comes from: enqueue, raw SQL, settings, command-line flags.

Each is refused with a clear error (the caller's transaction still usable), or, when it is
already in the table, fails its own job and never the worker.
"""

import math
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from django.core import checks
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_pgjobs import EnqueueError, JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from tests.acceptance.test_command import runjobs
from tests.conftest import ROOT, sql, sql_one
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def nested(depth, leaf=None, kind=dict):
    value = leaf
    for _ in range(depth):
        value = {"n": value} if kind is dict else [value]
    return value


# --- in the table already: never imported, never the worker's death --------------------------


def test_raw_inserted_dotted_types_run_nothing_and_the_worker_keeps_going(start_worker, invariants):
    marker = Path(tempfile.gettempdir()) / f"pgjobs-pwned-{uuid.uuid4().hex}"
    evil = [
        "os.system",
        "subprocess.call",
        "builtins.exec",
        "django.core.management.call_command",
        "django_pgjobs.queries.cancel",
    ]
    for job_type in evil:
        sql(
            "INSERT INTO pgjobs_job (type, config, priority) VALUES (%s, %s::jsonb, 100)",
            [job_type, f'{{"command": "touch {marker}", "args": ["touch {marker}"]}}'],
        )
    raw = [r[0] for r in sql("SELECT id FROM pgjobs_job ORDER BY id")]
    ok = enqueue_many("test.behave", [{"do": "ok"}] * 5)
    invariants.track(raw, ok)
    w = start_worker("--burst", "--concurrency", "2", "-v", "1")
    assert w.wait(timeout=60) == 0, w.output()
    assert not marker.exists()
    assert set(sql("SELECT type, status, attempts FROM pgjobs_job WHERE id = ANY(%s)", [raw])) == {
        (t, "PENDING", 0) for t in evil
    }
    assert Job.objects.filter(id__in=ok, status=JobStatus.COMPLETED).count() == 5
    invariants.check(drained=True, still_pending=raw)


def test_raw_inserted_config_python_cannot_decode_fails_its_job_not_the_worker(
    start_worker, invariants
):
    """jsonb happily stores what enqueue refuses: 10,000 levels of nesting, a 5,000-digit
    integer, an array instead of an object. Each such job is failed with a clear error without
    running its handler; the worker and the other jobs go on."""
    deep = "[" * 10_000 + "]" * 10_000
    bad = {
        "deep": f'{{"do": "ok", "x": {deep}}}',
        "huge int": '{"do": "ok", "n": 1' + "0" * 5000 + "}",
        "array": '[{"do": "ok"}]',
    }
    ids = {}
    for name, config in bad.items():
        ids[name] = sql_one(
            "INSERT INTO pgjobs_job (type, config, priority) "
            "VALUES ('test.behave', %s::jsonb, 10) RETURNING id",
            [config],
        )
    ok = enqueue_many("test.behave", [{"do": "ok"}] * 5)
    invariants.track(ids.values(), ok)
    w = start_worker("--burst", "--concurrency", "2", "-v", "1")
    assert w.wait(timeout=60) == 0, w.output()[-5000:]
    for name, job_id in ids.items():  # (the ORM cannot load such a config either)
        status, attempts, error = Job.objects.values_list("status", "attempts", "error").get(
            pk=job_id
        )
        assert (status, attempts) == (JobStatus.FAILED, 1), (name, status, error)
        assert "config" in error and "not run" in error, (name, error)
    assert not Execution.objects.filter(job_id__in=ids.values()).exists()
    assert Job.objects.filter(id__in=ok, status=JobStatus.COMPLETED).count() == 5
    invariants.check(drained=True)


# --- refused at enqueue, before any SQL, transaction still usable ----------------------------


def refused_before_sql(call, error=EnqueueError, match=None):
    """``call`` raises ``error`` without sending a query, and the transaction goes on."""
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries, pytest.raises(error) as info:
            call()
        assert queries.captured_queries == [], "refused only after talking to the database"
        kept = enqueue("test.echo", {"after": "refusal"})
    assert Job.objects.filter(pk=kept.id).exists()
    if match:
        assert match in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"config": {"\ud800": 1}}, "lone surrogate"),
        ({"config": {"a": [{"b": "x\udfff"}]}}, "config['a'][0]['b'] contains a lone surrogate"),
        ({"config": {"k\x00": 1}}, "NUL"),
        ({"config": {"n": 10**5000}}, "config['n']"),
        ({"config": {"x": -math.inf}}, "NaN and Infinity"),
        ({"queue": "q\ud800"}, "invalid queue name"),
        ({"trace_id": "t\ud800"}, "trace_id"),
        ({"tenant_id": "\udc80"}, "tenant_id"),
        ({"operated_by": "user\ud800"}, "operated_by"),
        ({"unique_key": "k\udfff"}, "unique_key"),
    ],
    ids=[
        "surrogate-key",
        "surrogate-deep",
        "nul-key",
        "5000-digit-int",
        "-inf",
        "queue",
        "trace_id",
        "tenant_id",
        "operated_by",
        "unique_key",
    ],
)
def test_unencodable_input_is_refused_clearly(kwargs, match):
    config = kwargs.pop("config", {})
    refused_before_sql(lambda: enqueue("test.echo", config, **kwargs), match=match)


def test_unknown_type_with_a_surrogate_is_refused_clearly():
    refused_before_sql(lambda: enqueue("os.system\ud800", {}), match="unknown job type")


def test_ten_megabyte_config_is_refused_before_sql():
    message = refused_before_sql(
        lambda: enqueue("test.echo", {"blob": "x" * 10_000_000}),
        match="over the 1,048,576-byte limit",
    )
    assert "10,000,0" in message  # names the actual size


@pytest.mark.parametrize("kind", [dict, list])
def test_ten_thousand_levels_of_nesting_are_refused_before_sql(kind):
    deep = nested(10_000, kind=kind)
    refused_before_sql(lambda: enqueue("test.echo", {"x": deep}), match="nested deeper than 64")
    refused_before_sql(lambda: enqueue_many("test.echo", [{}, {"x": deep}]), match="configs[1]")


# --- settings and flags: refused before the worker touches the database -----------------------


@pytest.mark.parametrize(
    ("pgjobs", "check_id"),
    [
        ({"LEASE_SECONDS": -1}, "pgjobs.E003"),
        ({"LEASE_SECONDS": float("nan")}, "pgjobs.E003"),
        ({"REAP_INTERVAL": float("inf")}, "pgjobs.E003"),
        ({"POLL_INTERVAL": "1"}, "pgjobs.E003"),
        ({"MAX_ATTEMPTS": 0}, "pgjobs.E004"),
        ({"CONCURRENCY": True}, "pgjobs.E004"),
        ({"PREFETCH": -1}, "pgjobs.E004"),
        ({"PREFETCH": 2.5}, "pgjobs.E004"),
        ({"TIMEOUT": -5}, "pgjobs.E005"),
        ({"TIMEOUT": float("nan")}, "pgjobs.E005"),
        ({"DATABASE": "nope"}, "pgjobs.E006"),
        ({"BACKOFF_JITTER": 1.5}, "pgjobs.E008"),
        ({"LEASE_SECOND": 30}, "pgjobs.E002"),
        ({"PREPARED_STATEMENTS": "yes"}, "pgjobs.E010"),
        ({"PREPARED_STATEMENTS": None}, "pgjobs.E010"),
    ],
)
def test_invalid_settings_are_numbered_check_errors(settings, pgjobs, check_id):
    settings.PGJOBS = pgjobs
    found = [m.id for m in checks.run_checks() if m.id and m.id.startswith("pgjobs.")]
    assert check_id in found, found


@pytest.mark.parametrize("value", ["auto", True, False])
def test_prepared_statements_accepts_its_three_values(settings, value):
    settings.PGJOBS = {"PREPARED_STATEMENTS": value}
    assert "pgjobs.E010" not in [m.id for m in checks.run_checks()]


def test_settings_that_are_not_a_dict_are_refused(settings):
    settings.PGJOBS = [("LEASE_SECONDS", 1)]
    assert "pgjobs.E001" in [m.id for m in checks.run_checks()]


def test_runjobs_with_invalid_settings_stops_at_the_checks_without_touching_the_database():
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        PGJOBS_JSON='{"LEASE_SECONDS": -1}',
        DATABASE_URL="postgres://nobody@127.0.0.1:1/unreachable",
    )
    proc = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "runjobs", "--settings", "tests.acceptance.bad_settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "pgjobs.E003" in proc.stderr and "LEASE_SECONDS" in proc.stderr
    assert "Traceback" not in proc.stderr and "connection" not in proc.stderr.lower()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lease", "0"], "seconds > 0"),
        (["--lease", "-1"], "seconds > 0"),
        (["--lease", "inf"], "seconds > 0"),
        (["--reap-interval", "nan"], "seconds > 0"),
        (["--max-jobs", "0"], "expected an integer >= 1"),
        (["--worker-id", ""], "worker id"),
        (["--worker-id", "a\nb"], "worker id"),
        (["--queues", "ok,bad queue"], "invalid queue name"),
        (["--queues", 'q"; DROP TABLE pgjobs_job; --'], "invalid queue name"),
    ],
)
def test_more_bad_flags_exit_2_without_touching_the_database(args, message):
    proc = runjobs(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
