"""A throwaway PgBouncer (Debian's ``pgbouncer``) in front of a PostgreSQL, for tests and benches.

    from pgbouncer import PgBouncer

    with PgBouncer(upstream_url, pool_size=3) as bouncer:   # pool_mode = transaction
        bouncer.url_for("test_pgjobs")    # postgres://user@127.0.0.1:PORT/test_pgjobs

It listens on a free loopback port (no Unix socket), forwards every database name to the same
name upstream (``* = host=… port=…``) with ``pool_size`` server connections per database and
user, and accepts any client that names the upstream's user: ``auth_type = trust`` (PgBouncer
still wants the user in ``auth_file``, which also carries the upstream password, if any, for
PgBouncer's own login upstream). PgBouncer refuses to run as root: as root it runs as
``nobody``. It is our child process in the foreground and gets SIGTERM if we die
(PR_SET_PDEATHSIG), so a killed test run leaves no PgBouncer behind.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = ["PgBouncer", "PgBouncerError", "find_pgbouncer"]

START_TIMEOUT = 15.0  # seconds until it accepts connections


class PgBouncerError(RuntimeError):
    pass


def find_pgbouncer() -> str | None:
    """The pgbouncer binary (Debian puts it in /usr/sbin, not always on a user's PATH)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    def __init__(
        self,
        upstream_url: str,
        *,
        pool_size: int = 3,
        pool_mode: str = "transaction",
        max_client_conn: int = 500,
        extra: dict[str, str] | None = None,
    ):
        parts = urlsplit(upstream_url)
        self.user = unquote(parts.username or "postgres")
        self.password = unquote(parts.password or "")
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 5432
        self.pool_size = pool_size
        self.pool_mode = pool_mode
        self.max_client_conn = max_client_conn
        self.extra = dict(extra or {})
        self.port: int | None = None
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def url_for(self, database: str) -> str:
        auth = quote(self.user, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        return f"postgres://{auth}@127.0.0.1:{self.port}/{quote(database, safe='')}"

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> PgBouncer:
        binary = find_pgbouncer()
        if binary is None:
            raise PgBouncerError("pgbouncer is not installed: apt-get install -y pgbouncer")
        self.dir = Path(tempfile.mkdtemp(prefix="pgjobs-bouncer-"))
        for _ in range(5):  # a free port may be taken between our probe and its bind
            self.port = _free_port()
            self._write_config()
            self._log = open(self.dir / "log", "ab")  # noqa: SIM115 - closed by stop()
            self.proc = subprocess.Popen(  # noqa: S603 - our own fixed command
                [binary, str(self.dir / "pgbouncer.ini")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                preexec_fn=self._as_child,
                cwd=self.dir,
            )
            if self._wait_ready():
                return self
            self.stop()
            if "Address already in use" not in self.log():
                break
        raise PgBouncerError(f"pgbouncer did not start:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # immediate shutdown: clients are cut
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log(self) -> str:
        try:
            return (self.dir / "log").read_text(errors="replace") if self.dir else ""
        except OSError:
            return ""

    # --- internals ----------------------------------------------------------------------------

    def _write_config(self) -> None:
        assert self.dir is not None
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.dir / "users.txt"),
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "min_pool_size": "0",
            "reserve_pool_size": "0",
            "max_client_conn": str(self.max_client_conn),
            "max_db_connections": "0",
            "server_lifetime": "3600",
            "server_idle_timeout": "600",
            "admin_users": self.user,
            "stats_users": self.user,
            "ignore_startup_parameters": "extra_float_digits",
            **self.extra,
        }
        upstream = f"host={self.upstream_host} port={self.upstream_port} user={self.user}"
        ini = [
            "[databases]",
            f"* = {upstream}",
            "",
            "[pgbouncer]",
            *(f"{k} = {v}" for k, v in settings.items()),
            "",
        ]
        (self.dir / "pgbouncer.ini").write_text("\n".join(ini))
        (self.dir / "users.txt").write_text(f"{_quoted(self.user)} {_quoted(self.password)}\n")
        if os.geteuid() == 0:  # it will run as nobody: let it read its files
            nobody = pwd.getpwnam("nobody")
            for path in (self.dir, self.dir / "pgbouncer.ini", self.dir / "users.txt"):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)

    @staticmethod
    def _as_child() -> None:
        """In the child before exec: drop root (PgBouncer refuses it), then ask for SIGTERM
        when our parent dies (after the uid change, which would clear it)."""
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                time.sleep(0.05)
        return False
