"""Only queries.py writes pgjobs_job: the package's source is scanned for SQL that inserts,
updates or deletes job rows and for ORM writes through the Job model, and every writer found
must be one of the named statements listed here (each with its purpose)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_pgjobs"
HOME = "queries.py"

# The statements that may write pgjobs_job: the module constant or function of queries.py that
# holds each, and what it does.
ALLOWED = {
    "_INSERT_ONE": "enqueue one job (+ the doorbell)",
    "_INSERT_MANY": "enqueue many jobs sharing their options",
    "_INSERT_WINDOWED": "enqueue one job holding a unique window (+ its pgjobs_unique row)",
    "_INSERT_DEBOUNCED": "enqueue one debounced job, or merge it into its key's open job",
    "_AGE": "aging: lift long-waiting due jobs one priority step per interval",
    "_INSERT_WORKFLOW": "enqueue a workflow's jobs, waiting for their dependencies",
    "_FAN_IN": "fan-in: a child's counter, and at zero its PENDING or CANCELLED, as its last "
    "dependency ends (carried by every statement that ends jobs)",
    "_CANCEL": "operator: cancel pending and waiting jobs",
    "_CLAIMED": "claim: the rows locked by a claim become RUNNING under a fresh lease",
    "_FINALIZED": "finalize: record how runs we still hold ended (with or without fan-in)",
    "_HEARTBEAT": "extend the leases we still hold",
    "_PROGRESS": "store the progress of running jobs we hold",
    "_RELEASE": "give held jobs back to the queue (shutdown)",
    "_REAP": "rescue jobs whose lease expired",
    "_PRUNE_FINISHED": "retention: delete finished jobs past their days",
    "retry_now": "operator: failed/cancelled -> pending",
    "run_now": "operator: scheduled -> due now",
    "cancel": "operator: cancel pending, request cancel of running",
    "duplicate": "operator: a fresh copy of each job",
    "delete_terminal": "operator: delete finished jobs",
    "_NOTE_OPERATOR_ACTION": "operator: who did it, in the job's history",
}

_JOB_TABLE = r"(?:\{(?:T|JOB_TABLE|tables\.JOB_TABLE)\}|\"?pgjobs_job\"?(?![A-Za-z0-9_]))"
_WRITE = re.compile(
    rf"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|"
    rf"COPY)\s+(?:ONLY\s+)?{_JOB_TABLE}",
    re.IGNORECASE,
)
_ORM_WRITES = {
    "update",
    "delete",
    "create",
    "bulk_create",
    "bulk_update",
    "get_or_create",
    "update_or_create",
    "save",
    "raw",
}


def _text(node: ast.AST) -> str | None:
    """A string literal, or an f-string with each interpolation written as its source."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
            for v in node.values
        )
    return None


def _owners(tree: ast.Module) -> dict[int, str]:
    """Each node's owner: the module-level name it is assigned to or the top-level function or
    class it is in (a method is named Class.method)."""
    owner: dict[int, str] = {}

    def mark(node: ast.AST, name: str) -> None:
        for n in ast.walk(node):
            owner.setdefault(id(n), name)

    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            mark(stmt, stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    mark(item, f"{stmt.name}.{item.name}")
            mark(stmt, stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if names:
                mark(stmt, names[0])
    return owner


def _root(node: ast.AST) -> ast.AST:
    """The start of a chain such as Job.objects.using(a).filter(...).update."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _job_names(tree: ast.Module) -> set[str]:
    """Job, and the names bound to expressions starting from it (querysets, instances)."""
    names = {"Job"}
    for _ in range(3):  # a chain of assignments a few deep
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(root := _root(node.value), ast.Name)
                and root.id in names
            ):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def writers(source: str) -> list[tuple[int, str, str]]:
    """(line, owner, what) of each write to pgjobs_job in ``source``."""
    tree = ast.parse(source)
    owner = _owners(tree)
    job = _job_names(tree)
    found = []
    for node in ast.walk(tree):
        text = _text(node)
        if text is not None and (m := _WRITE.search(text)):
            found.append((node.lineno, owner.get(id(node), "?"), " ".join(m.group().split())))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _ORM_WRITES
            and isinstance(root := _root(node.func.value), ast.Name)
            and root.id in job
            and "__dict__" not in ast.unparse(node.func.value)
        ):  # an attribute dict
            found.append(
                (node.lineno, owner.get(id(node), "?"), f"ORM {root.id}...{node.func.attr}()")
            )
    return sorted(found)


def package_writers() -> dict[str, list[tuple[int, str, str]]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        hits = writers(path.read_text())
        if hits:
            found[str(path.relative_to(PACKAGE))] = hits
    return found


def test_only_the_named_statements_of_queries_py_write_jobs():
    found = package_writers()
    elsewhere = {m: hits for m, hits in found.items() if m != HOME}
    unlisted = [
        (line, name, what) for line, name, what in found.get(HOME, []) if name not in ALLOWED
    ]
    assert not elsewhere and not unlisted, (
        "pgjobs_job is written outside the state machine's named statements:\n"
        + "\n".join(
            f"  {m}:{line} in {name}: {what}"
            for m, hits in elsewhere.items()
            for line, name, what in hits
        )
        + "\n".join(
            f"  {HOME}:{line} in {name}: {what} (not in ALLOWED)" for line, name, what in unlisted
        )
        + "\nMove the statement into queries.py as a named statement with a one-line purpose "
        "and list it in ALLOWED (tests/unit/test_job_writers.py)."
    )


def test_every_listed_statement_still_writes_jobs():
    """The list stays true: a statement removed or renamed is taken off it."""
    names = {name for _, name, _ in package_writers().get(HOME, [])}
    assert set(ALLOWED) <= names, f"listed but writing nothing: {sorted(set(ALLOWED) - names)}"


def test_the_writer_functions_say_what_they_do():
    tree = ast.parse((PACKAGE / HOME).read_text())
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    missing = [n for n in ALLOWED if n in functions and not ast.get_docstring(functions[n])]
    assert not missing, f"queries.py functions without a docstring: {missing}"


def test_the_scan_finds_writers_of_every_kind():
    """The scanner itself: SQL in literals and f-strings, ORM calls on Job and its querysets."""
    source = '''
from .tables import JOB_TABLE
from .models import Job
A = f"UPDATE {JOB_TABLE} SET status = 'PENDING'"
B = "delete from pgjobs_job where id = 1"
C = f"""WITH x AS (SELECT 1)
INSERT INTO {T} (type) VALUES ('t')"""
OK = f"SELECT id FROM {JOB_TABLE} FOR UPDATE SKIP LOCKED"
OK2 = "UPDATE pgjobs_job_other SET x = 1"
OK3 = f"UPDATE {SCHEDULE_TABLE} SET enabled = true"
def f(ids):
    Job.objects.using("default").filter(id__in=ids).update(status="PENDING")
    qs = Job.objects.filter(id__in=ids)
    qs.delete()
    job = Job.objects.get(pk=1)
    job.save()
    Job.objects.create(type="t")
    other = {}
    other.update(a=1)
    job.__dict__.update({"id": 1})
'''
    found = writers(source)
    assert [(name, what) for _, name, what in found] == [
        ("A", "UPDATE {JOB_TABLE}"),
        ("B", "delete from pgjobs_job"),
        ("C", "INSERT INTO {T}"),
        ("f", "ORM Job...update()"),
        ("f", "ORM qs...delete()"),
        ("f", "ORM job...save()"),
        ("f", "ORM Job...create()"),
    ], found


def hand_written_history_entries(root: Path = PACKAGE) -> list[str]:
    """SQL strings that build a history entry ('outcome' in a jsonb_build_object) by hand."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            text = _text(node)
            if text and "jsonb_build_object(" in text and "'outcome'" in text:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(set(found))


def test_history_entries_come_from_one_builder():
    found = hand_written_history_entries()
    assert not found, (
        "a history entry is written by hand; build it with "
        f"queries.history_entry()/history_appended(): {found}"
    )
