"""Security guards: no code or object is ever loaded from stored data, SQL carries values only
as parameters, queue and channel names are validated and quoted (secrets out of the worker's log:
tests/acceptance/test_secrets_in_logs.py)."""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_pgjobs import InvalidJobOption, JobStatus, enqueue, handler
from django_pgjobs.models import Job
from django_pgjobs.worker.listener import Armed, Listener
from tests.conftest import eventually, sql_one

PACKAGE = Path(__file__).resolve().parents[2] / "django_pgjobs"

# --- no pickle, no eval, no import of a path read from the database ---------------------------

UNSAFE_MODULES = {
    "pickle",
    "_pickle",
    "cPickle",
    "marshal",
    "shelve",
    "dill",
    "cloudpickle",
    "jsonpickle",
    "copyreg",
}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__", "breakpoint"}
UNSAFE_FUNCTIONS = {
    "import_module",
    "import_string",
    "locate",
    "load_module",
    "run_path",
    "run_module",
}


def unsafe_calls(source: str, filename: str = "<source>") -> list[str]:
    """Lines of ``source`` that could turn stored data into code or objects."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [
                f"{where} import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in UNSAFE_MODULES
            ]
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if module in UNSAFE_MODULES:
                found.append(f"{where} from {node.module} import …")
            found += [
                f"{where} from {node.module} import {a.name}"
                for a in node.names
                if a.name in UNSAFE_FUNCTIONS
            ]
        elif isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else (func.attr if isinstance(func, ast.Attribute) else None)
            )
            builtin = isinstance(func, ast.Name) and name in UNSAFE_BUILTINS
            if builtin or name in UNSAFE_FUNCTIONS:
                found.append(f"{where} calls {name}()")
    return found


def test_the_package_never_deserialises_or_executes_stored_data():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += unsafe_calls(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert not found, (
        "django_pgjobs must never load code or objects from data: job types are dispatched "
        "through registry.get(type) only, configs and results are JSON. Remove these (a path "
        "read from the database must never be imported, pickle must never be used):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    "source",
    [
        "import pickle",
        "from marshal import loads",
        "import dill.settings",
        "eval(row[1])",
        "exec(code)",
        "__import__(job.type)",
        "from django.utils.module_loading import import_string",
        "importlib.import_module(job.type)",
        "pydoc.locate(name)",
        "compile(src, 'f', 'exec')",
    ],
)
def test_the_scan_catches_each_unsafe_form(source):
    assert unsafe_calls(source)


def test_the_scan_lets_regular_expressions_be():
    assert unsafe_calls("import re\nPATTERN = re.compile('x')") == []


# --- SQL: values are parameters, only constants are interpolated ------------------------------

# Interpolated names that are not module constants, each checked against a fixed tuple of
# literals just before the query (file, name) -> why it is safe.
CHECKED_NAMES = {
    ("admin.py", "column"): "recent_values() accepts only 'queue' or 'tenant_id'",
    ("rollups.py", "group_by"): "minute_rows() accepts only 'queue' or 'type'",
    ("rollups.py", "table"): "prune() loops over a literal tuple of table names",
    ("rollups.py", "column"): "prune() loops over a literal tuple of column names",
    ("admin_counts.py", "cond"): "TABS: a literal tuple of conditions built from JobStatus",
    ("doorbell.py", "k"): "an int: channel_key() is a crc32",
    ("queries.py", "ring"): "doorbell.ring_sql(): literals, int keys and the caller's columns",
    ("queries.py", "j"): "_claimable()'s column prefix: '' or 'j.', a literal at every call",
    ("queries.py", "types"): "_claimable()'s parameter name, a literal at every call",
    ("queries.py", "tat"): "tokens_sql()'s column: a literal or the constant _KEY_TAT",
    **{
        ("queries.py", part): "_claim_controlled_sql(): a literal of _FAIR_PARTS, or ''"
        for part in ("vt", "line_cols", "line_vals", "line_order", "key_vp", "keyless_vp")
        + ("picked_vp", "pick_order", "shared")
    },
}
# Functions composing SQL from literals; a call to one is allowed when its arguments are literals,
# module constants or calls to these (the test above checks their own f-strings).
FRAGMENTS = {
    "_claimable",
    "_due",
    "tokens_sql",
    "history_entry",
    "history_appended",
    "silent_since",
}
_SQL = re.compile(r"\b(SELECT|UPDATE|INSERT|DELETE|LISTEN|NOTIFY|TRUNCATE)\b")
_CONSTANT = re.compile(r"^(?:[a-z_]+\.)?_?[A-Z][A-Z0-9_]*(?:\.replace\([^()]*\))?$")


def _literal_fragment(node: ast.expr) -> bool:
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FRAGMENTS
    ):
        return False
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    return all(n in FRAGMENTS or _CONSTANT.match(n) for n in names)


def test_sql_strings_interpolate_only_constants():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.JoinedStr):
                continue
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if not _SQL.search(text):
                continue
            for part in node.values:
                if not isinstance(part, ast.FormattedValue):
                    continue
                expr = ast.unparse(part.value)
                if (
                    _CONSTANT.match(expr)
                    or (path.name, expr) in CHECKED_NAMES
                    or _literal_fragment(part.value)
                ):
                    continue
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {{{expr}}}")
    assert not found, (
        "SQL built with an f-string interpolates a value: pass it as a query parameter (%s) "
        "instead; only module constants (table names) may be interpolated. If the name is "
        "checked against a fixed tuple of literals just above, add (file, name) to "
        "CHECKED_NAMES with the reason:\n" + "\n".join(found)
    )


# --- queue names and the LISTEN channel -------------------------------------------------------

EVIL_QUEUES = [
    'q"; DROP TABLE pgjobs_job; --',
    "q' OR '1'='1",
    "a b",
    "q\x00",
    "é",
    "x" * 64,
    "$(touch /tmp/x)",
]


@pytest.mark.parametrize("name", EVIL_QUEUES)
def test_queue_names_are_validated_at_enqueue(name, db):
    with pytest.raises(InvalidJobOption, match="invalid queue name"):
        enqueue("test.echo", {}, queue=name)


@pytest.mark.parametrize("name", EVIL_QUEUES)
def test_queue_names_are_validated_at_handler_definition(name):
    with pytest.raises((InvalidJobOption, ImproperlyConfigured)):
        handler("test.never_registered", queue=name)


@pytest.mark.django_db(transaction=True)
def test_the_listen_channel_is_quoted_as_an_identifier(settings):
    channel = 'Pg "Jobs"; DROP TABLE pgjobs_job; --'
    settings.PGJOBS = {**settings.PGJOBS, "NOTIFY_CHANNEL": channel}
    woken = threading.Event()
    listener = Listener(
        alias="default",
        channel=channel,
        queues=["default"],
        wake=woken.set,
        application_name="pgjobs:security-test:listen",
    )
    listener.start()
    try:
        eventually(listener.connected.is_set, timeout=10, message="listener connected")
        woken.wait(2)  # the wakeup every (re)connect gives
        woken.clear()
        assert listener.arm(5.0) is Armed.FRESH  # asleep: enqueue rings
        job = enqueue("test.echo", {})
        assert woken.wait(10), "NOTIFY on the quoted channel never arrived"
    finally:
        listener.stop()
        listener.join(10)
    assert Job.objects.get(pk=job.id).status == JobStatus.PENDING  # the table is still there
    assert sql_one("SELECT count(*) FROM pgjobs_job") == 1


@pytest.mark.parametrize("channel", ["", "x" * 64, 5, None])
def test_a_channel_postgres_cannot_notify_on_is_a_check_error(settings, channel):
    """pg_notify() refuses names over 63 bytes: every enqueue would fail inside the caller's
    transaction. The system check catches it at start-up instead."""
    settings.PGJOBS = {**settings.PGJOBS, "NOTIFY_CHANNEL": channel}
    assert "pgjobs.E009" in [m.id for m in checks.run_checks()]
