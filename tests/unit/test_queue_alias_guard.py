"""Guard: no statement of the package may go to the default database by accident.

With PGJOBS["DATABASE"] naming a database of its own, `django.db.connection`, `connections[
"default"]`, or `transaction.atomic()` / `on_commit()` without `using=` would read or write the
wrong database (tests/acceptance/test_queue_alias.py proves the paths it runs; this catches the
ones it does not).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_pgjobs"
FIX = (
    "use connections[alias] / transaction.atomic(using=alias) with alias = using or "
    "conf.get('DATABASE') (see docs/queue-database.md)"
)


def offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "django.db"
            and any(a.name == "connection" for a in node.names)
        ):
            found.append(f"{where}: imports django.db.connection (the default database)")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "connections"
            and isinstance(node.slice, ast.Constant)
        ):
            found.append(f"{where}: connections[{node.slice.value!r}]")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "transaction"
            and node.func.attr in ("atomic", "on_commit")
            and not any(k.arg == "using" for k in node.keywords)
        ):
            found.append(f"{where}: transaction.{node.func.attr}() without using=")
    return found


def test_no_statement_goes_to_the_default_database_by_accident():
    found = [
        f"{path.parent.name}/{o}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
        for o in offences(path)
    ]
    assert not found, "\n".join(found) + "\n" + FIX


def test_the_guard_catches_each_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from django.db import connection, transaction\n"
        "from django.db import connections\n"
        "connections['default'].cursor()\n"
        "with transaction.atomic():\n    pass\n"
        "transaction.on_commit(print)\n"
        "transaction.atomic(using='x')\n"
    )
    assert len(offences(sample)) == 4, offences(sample)
