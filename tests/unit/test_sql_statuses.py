"""Statuses in SQL come from JobStatus: no SQL string of the package names a status the enum
lacks, and outside migrations and the statements listed below none is typed by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from django_pgjobs.status import JobStatus

PACKAGE = Path(__file__).resolve().parents[2] / "django_pgjobs"
STATUSES = set(JobStatus.values)

_SQL = re.compile(
    r"\b(SELECT|UPDATE|INSERT|DELETE|WHERE|FILTER|RETURNING|CHECK)\b"
    r"|\bstatus\"?(::text)?\s*(=|<>|!=|IN\b|NOT IN\b)"
)  # or a bare condition
_QUOTED = re.compile(r"'([A-Z][A-Z0-9_]*)'")  # 'PENDING'
_ARRAY = re.compile(r"'\{([A-Z][A-Z0-9_,]*)\}'")  # '{PENDING,RUNNING}'::text[]

# Lease-fenced statements of queries.py that keep their literals until their rewrite lands.
HAND_TYPED_OK: set[tuple[str, str]] = set()  # (module, constant) allowed to type statuses


def sql_strings(source: str) -> list[tuple[int, str | None, str]]:
    """(line, module constant it is assigned to or None, text) of each SQL-looking string:
    plain literals and f-strings (an interpolation reads as {}), docstrings left out."""
    tree = ast.parse(source)
    owner: dict[int, str] = {}
    for stmt in tree.body:
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else ([stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
        )
        for target in targets:
            if isinstance(target, ast.Name) and stmt.value is not None:
                owner.update((id(n), target.id) for n in ast.walk(stmt.value))
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)  # read as part of the f-string
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if _SQL.search(text):
            found.append((node.lineno, owner.get(id(node)), text))
    return found


def named_statuses(text: str) -> set[str]:
    words = set(_QUOTED.findall(text))
    for items in _ARRAY.findall(text):
        words.update(items.split(","))
    return words


def package_sql() -> list[tuple[str, int, str | None, str]]:
    return [
        (str(path.relative_to(PACKAGE.parent)), line, name, text)
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name, text in sql_strings(path.read_text())
    ]


def unknown_statuses(source: str) -> list[str]:
    return sorted(w for _, _, text in sql_strings(source) for w in named_statuses(text) - STATUSES)


def hand_typed(where: str, source: str) -> list[str]:
    return [
        f"{where}:{line} {sorted(named_statuses(text) & STATUSES)}"
        for line, name, text in sql_strings(source)
        if named_statuses(text) & STATUSES and (Path(where).name, name) not in HAND_TYPED_OK
    ]


def test_sql_names_only_job_statuses():
    found = [
        f"{where}:{line} {sorted(named_statuses(text) - STATUSES)}"
        for where, line, _, text in package_sql()
        if named_statuses(text) - STATUSES
    ]
    assert not found, (
        "SQL names a status that JobStatus does not have (the CHECK constraint would refuse "
        f"it, or the statement matches nothing); JobStatus has {sorted(STATUSES)}. Build the "
        "status from the enum instead: status.PENDING_SQL, ACTIVE_SQL, TERMINAL_SQL … or "
        "status.sql_in(JobStatus.X, …) in a module constant:\n" + "\n".join(found)
    )


def test_statuses_in_sql_come_from_the_enum():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:  # history: written once, never edited
            found += hand_typed(str(path.relative_to(PACKAGE.parent)), path.read_text())
    assert not found, (
        "SQL types a status by hand: interpolate a constant of django_pgjobs/status.py instead "
        "(PENDING_SQL, RUNNING_SQL, ACTIVE_SQL, TERMINAL_SQL, RETRYABLE_SQL …, or a new module "
        "constant built with status.sql_in(JobStatus.X, …)); only the statements in "
        "HAND_TYPED_OK keep their literals:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "source",
    [
        "X = \"UPDATE t SET status = 'FINISHED'\"",
        "def f():\n    cur.execute(f\"SELECT 1 FROM {T} WHERE status IN ('PENDING', 'DONE')\")",
        "NEW = \"status = ANY('{PENDING,STARTED}'::text[])\"",
    ],
)
def test_the_scan_catches_a_status_the_enum_lacks(source):
    assert unknown_statuses(source)


@pytest.mark.parametrize(
    "source",
    [
        "X = \"SELECT id FROM t WHERE status = 'PENDING'\"",
        "def f():\n    cur.execute(f\"DELETE FROM {T} WHERE status IN ('FAILED', 'CANCELLED')\")",
        "_CLAIM = \"UPDATE t SET status = 'RUNNING'\"",  # exempt in queries.py only
    ],
)
def test_the_scan_catches_a_hand_typed_status(source):
    assert hand_typed("django_pgjobs/other.py", source)


def test_the_scan_lets_enum_built_sql_and_prose_be():
    source = (
        '"""Docstring: WHERE status = \'PENDING\' is prose."""\n'
        "X = f\"SELECT id FROM {T} WHERE status = {PENDING_SQL} AND queue = 'default'\"\n"
        'Y = "WHERE status = %s"\n'
    )
    assert not hand_typed("django_pgjobs/other.py", source)
    assert not unknown_statuses(source)
