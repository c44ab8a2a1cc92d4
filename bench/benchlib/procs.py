"""Child processes of the benchmark: each in its own session, always killed at the end.

Peak RSS is taken two ways and the larger is kept: VmHWM of every process of the
worker's session (sampled while it runs, so it also covers children) and ru_maxrss from
wait4() when the worker exits by itself.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from . import foreign

_ALL: list[Proc] = []


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # field 6 is the session id; the command name (field 2) may contain spaces
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def vm_kb(pid: int, field: str = "VmHWM") -> int:
    """A memory figure of /proc/<pid>/status in kB (VmHWM: peak resident, VmRSS: now); 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Proc:
    def __init__(
        self,
        argv: list[str],
        *,
        env: dict,
        cwd: str | None = None,
        log_path: Path,
        name: str = "",
        pipes: bool = False,
    ) -> None:
        """``pipes``: stdin and stdout are pipes for ``send()``/``reply()`` (stderr still goes
        to the log)."""
        self.name = name or Path(argv[0]).name
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self._log.write(("\n$ " + " ".join(argv) + "\n").encode())
        self._log.flush()
        self.started = time.monotonic_ns()
        self.p = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else self._log,
            stderr=self._log if pipes else subprocess.STDOUT,
            start_new_session=True,
        )
        self._out = b""  # stdout read but not yet returned by reply()
        self.pid = self.p.pid
        foreign.our_sessions.add(self.pid)
        self.rc: int | None = None
        self.exited_ns: int | None = None
        self.maxrss_kb = 0  # largest single process of the tree
        self.tree_kb = 0  # sum of per-process peaks across the tree
        self._peaks: dict[int, int] = {}
        _ALL.append(self)

    def poll(self) -> int | None:
        if self.rc is not None:
            return self.rc
        try:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.rc = self.p.returncode if self.p.returncode is not None else -1
            return self.rc
        if pid == 0:
            return None
        self.exited_ns = time.monotonic_ns()
        self.rc = os.waitstatus_to_exitcode(status)
        self.p.returncode = self.rc  # keep Popen from waiting again
        self.maxrss_kb = max(self.maxrss_kb, ru.ru_maxrss)
        self._close_log()
        return self.rc

    def sample_memory(self) -> None:
        if self.rc is not None:
            return
        for pid in _session_pids(self.pid):
            hwm = vm_kb(pid)
            if hwm > self._peaks.get(pid, 0):
                self._peaks[pid] = hwm
        if self._peaks:
            self.maxrss_kb = max(self.maxrss_kb, max(self._peaks.values()))
            self.tree_kb = max(self.tree_kb, sum(self._peaks.values()))

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll() is not None:
                return self.rc
            time.sleep(0.01)
        return self.poll()

    def send(self, line: str) -> None:
        """Write one command line to the child's stdin (``pipes=True``)."""
        try:
            self.p.stdin.write(line.encode() + b"\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"{self.name} exited ({self.wait(1.0)})\n{self.tail()}") from None

    def reply(self, timeout: float) -> dict:
        """The child's next JSON line on stdout (``pipes=True``), waiting at most ``timeout``
        seconds; other lines go to the log."""
        fd = self.p.stdout.fileno()  # unbuffered reads: select() must see every byte not yet taken
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._out:
                line, self._out = self._out.split(b"\n", 1)
                if line.strip().startswith(b"{"):
                    return json.loads(line)
                if not self._log.closed:
                    self._log.write(line + b"\n")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"{self.name}: no answer in {timeout:.0f}s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"{self.name} exited ({self.wait(5.0)})\n{self.tail()}")
            self._out += chunk

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the whole session, then SIGKILL what is left after `grace` seconds."""
        if self.poll() is None:
            self.sample_memory()
            _signal_group(self.pid, signal.SIGTERM)
            if self.wait(grace) is None:
                _signal_group(self.pid, signal.SIGKILL)
                self.wait(5)
        # grandchildren that outlived the leader
        _signal_group(self.pid, signal.SIGKILL)
        self._close_log()
        for pipe in (self.p.stdin, self.p.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return self.rc

    def _close_log(self) -> None:
        if not self._log.closed:
            self._log.close()

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all() -> None:
    for p in list(_ALL):
        try:
            p.stop(grace=2.0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    _ALL.clear()


atexit.register(kill_all)


def run_json(
    argv: list[str], *, env: dict, cwd: str | None = None, timeout: float, log_path: Path
) -> dict:
    """Run a client command to completion (bounded) and parse the JSON on its last stdout line."""
    with open(log_path, "ab") as log:
        log.write(("\n$ " + " ".join(argv) + "\n").encode())
        log.flush()
        p = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
        foreign.our_sessions.add(p.pid)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGKILL)
            p.communicate()
            raise RuntimeError(f"timed out after {timeout:.0f}s: {' '.join(argv)}") from None
        finally:
            _signal_group(p.pid, signal.SIGKILL)
        text = out.decode(errors="replace")
        log.write(text.encode())
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(argv)} (see {log_path})")
    lines = [ln for ln in text.splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON output from {' '.join(argv)} (see {log_path})")
    return json.loads(lines[-1])
