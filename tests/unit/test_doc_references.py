"""Every code reference in README.md and docs/*.md resolves: a backticked `module.name` of the
package (`queries.claim`, `worker.leases`, `django_pgjobs.testing.run_jobs`), a file
(`netsafety.py`, `tests/acceptance/test_crashes.py`) or a test (`test_crashes.py::test_name…`).
Log actions (`job.lease_lost`, `worker.gave_up`) are told apart by the package's own list."""

from __future__ import annotations

import importlib
import re
from functools import cache

import django_pgjobs
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGE = ROOT / "django_pgjobs"
TREES = ("django_pgjobs", "tests", "docs", "bench", "scripts", "example_project", ".ci")
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
TEST = re.compile(r"([\w./…-]*)::(\w+)(…?)")
# Names the docs use for something else than the package's module of that name.
NOT_MODULES = {"context"}  # a Django @task's `context` argument (context.job, context.attempt)
READERS = "myapp/"  # paths in the reader's project, as the docs' examples name them


@cache
def files() -> list[str]:
    """The repository's files, relative to its root (not .venv, .git or artifacts)."""
    found = [p.name for p in ROOT.iterdir() if p.is_file()]
    for top in TREES:
        found += [
            str(p.relative_to(ROOT))
            for p in (ROOT / top).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return found


@cache
def top_modules() -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }


@cache
def log_actions() -> set[str]:
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        found.update(re.findall(r"""["']action["']\s*:\s*["']([\w.]+)["']""", path.read_text()))
    return found


def matching_files(name: str) -> list[str]:
    """Tracked files named ``name`` (a path or its tail; "…" stands for any characters)."""
    pattern = re.compile("(?:.*/)?" + ".*".join(map(re.escape, name.split("…"))))
    return [f for f in files() if pattern.fullmatch(f)]


@cache
def permissions() -> set[str]:
    """`django_pgjobs.<codename>`: the app's permissions, as the admin docs name them."""
    from django.apps import apps

    return {
        f"django_pgjobs.{c}"
        for model in apps.get_app_config("django_pgjobs").get_models()
        for c in _codenames(model)
    }


def _codenames(model: type) -> list[str]:
    meta = model._meta  # noqa: SLF001
    return [c for c, _ in meta.permissions] + [
        f"{a}_{meta.model_name}" for a in meta.default_permissions
    ]


def resolves(dotted: str) -> bool:
    """`a.b.c`: the longest importable module of django_pgjobs, then attributes."""
    parts = dotted.removeprefix("django_pgjobs.").split(".")
    for cut in range(len(parts), -1, -1):
        try:
            obj = importlib.import_module(".".join(["django_pgjobs", *parts[:cut]]))
        except ImportError as exc:
            if not (exc.name or "").startswith("django_pgjobs"):  # an extra not installed here
                return any(defined_in_source(parts[:k], parts[k:]) for k in range(1, cut + 1))
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def defined_in_source(module: list[str], attrs: list[str]) -> bool:
    """The module's file exists and defines the first of ``attrs`` at its top level (a module
    whose optional dependency, e.g. prometheus-client, is not installed in this environment)."""
    path = PACKAGE.joinpath(*module).with_suffix(".py")
    if not path.is_file():
        return False
    if not attrs:
        return True
    name = re.escape(attrs[0])
    return bool(re.search(rf"^(?:def|class) {name}\b|^{name}\s*[:=]", path.read_text(), re.M))


def has_test(name: str, prefix: bool, paths: list[str]) -> bool:
    end = "" if prefix else r"\b"
    pattern = re.compile(r"^\s*def " + re.escape(name) + end, re.MULTILINE)
    return any(pattern.search((ROOT / p).read_text()) for p in paths)


def problem(span: str) -> str | None:
    """Why ``span`` is a broken code reference; None when it resolves or is no reference."""
    if m := TEST.fullmatch(span):
        file, name, ellipsis = m.groups()
        paths = (
            [f for f in files() if f.startswith("tests/") and f.endswith(".py")]
            if file in ("", "…")
            else matching_files(file)
        )
        if not paths:
            return f"no file {file}"
        return None if has_test(name, bool(ellipsis), paths) else f"no test {name} in {file}"
    if re.fullmatch(r"[\w./-]+\.py", span):
        if span.startswith(READERS):
            return None
        return None if matching_files(span.removeprefix("./")) else "no such file"
    code = span.removesuffix("()")
    if DOTTED.fullmatch(code) and code not in log_actions() and code not in permissions():
        head = code.split(".")[0]
        if head == "django_pgjobs" or (head in top_modules() and head not in NOT_MODULES):
            return None if resolves(code) else "does not resolve"
    return None


def references() -> list[tuple[str, int, str]]:
    found = []
    for doc in DOCS:
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            found += [(doc.name, lineno, s) for s in SPAN.findall(line)]
    return found


def is_code(span: str) -> bool:
    code = span.removesuffix("()")
    return bool(
        TEST.fullmatch(span)
        or span.endswith(".py")
        or (DOTTED.fullmatch(code) and code.split(".")[0] in {"django_pgjobs", *top_modules()})
    )


def test_every_code_reference_in_the_docs_resolves():
    refs = references()
    assert sum(is_code(span) for _, _, span in refs) > 100  # the checker sees the references
    broken = [
        f"{doc}:{line}: `{span}`: {why}" for doc, line, span in refs if (why := problem(span))
    ]
    assert broken == [], (
        "code references in the docs that no longer resolve: fix the doc (or "
        "the name):\n" + "\n".join(broken)
    )


def test_every_file_path_in_the_prose_exists():
    """Paths written without backticks (`docs/topology.md` says tests/topology/test_x.py), outside
    code blocks (whose paths are the reader's: myapp/jobs.py)."""
    broken = []
    for doc in DOCS:
        prose = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)
        broken += [
            f"{doc.name}: {path}"
            for path in re.findall(r"[\w.-]+/[\w/.-]*\.py\b", prose)
            if not path.startswith(READERS) and not matching_files(path)
        ]
    assert broken == [], "file paths in the docs that do not exist:\n" + "\n".join(broken)


def test_every_relative_link_resolves():
    """Links between the docs and the bench's results (docs/performance.md and its dated
    measurements, bench/results/HISTORY.md)."""
    broken = []
    for doc in [*DOCS[1:], ROOT / "bench" / "results" / "HISTORY.md", ROOT / "bench" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text("utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == [], "relative links to nothing:\n" + "\n".join(broken)


def test_the_performance_design_stays_a_design():
    """docs/performance.md keeps what is fast and why; dated runs go to bench/results/HISTORY.md."""
    lines = (ROOT / "docs" / "performance.md").read_text("utf-8").count("\n")
    assert lines <= 400, f"docs/performance.md has {lines} lines: move dated figures to HISTORY.md"


def test_the_checker_finds_broken_references():
    assert problem("worker.loop.maintain") == "does not resolve"
    assert problem("queries.no_such_function()") == "does not resolve"
    assert problem("no_such_module.py") == "no such file"
    assert problem("myapp/jobs.py") is None  # the reader's
    assert defined_in_source(["contrib", "prometheus"], ["install"])
    assert not defined_in_source(["contrib", "prometheus"], ["no_such_function"])
    assert problem("test_crashes.py::test_no_such_test") is not None
    assert problem("queries.claim") is None and problem("worker.leases") is None
    assert problem("django_pgjobs.conf.SETTINGS") is None
    assert problem("job.lease_lost") is None  # a log action, not code
    assert problem("django_pgjobs.retry_job") is None  # a permission
    assert problem("django_pgjobs.no_such_name") == "does not resolve"
    assert django_pgjobs.__name__ == "django_pgjobs"
