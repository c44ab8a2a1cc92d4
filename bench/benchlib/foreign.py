"""How much CPU did *other* work use while a measurement ran?

On a shared 2-core machine, someone else's test-suite can halve a result. A Meter samples
/proc every 0.25 s in a thread and adds up the CPU time of every process that is not part
of the measurement: not the orchestrator, not a process in a session we started (workers,
clients), not a PostgreSQL backend of a ``bench_*`` database, and not PostgreSQL's own
auxiliary processes (checkpointer, WAL writer...). The result is in cores (1.0 = one core
busy all along) and is stored with each sample; a sample taken under foreign load is
repeated (see harness.measure).
"""

from __future__ import annotations

import os
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK")
_OWN = os.getpid()
our_sessions: set[int] = {os.getsid(0)}  # sessions of the bench: ours and those we start


def _scan() -> dict[int, tuple[int, bool]]:
    """pid -> (cpu ticks, is foreign)"""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        try:
            ppid, sid = int(rest[1]), int(rest[3])
            ticks = int(rest[11]) + int(rest[12])
        except (IndexError, ValueError):
            continue
        if ppid == 2 or pid == 2:  # kernel threads
            continue
        foreign = True
        if pid == _OWN or sid in our_sessions:
            foreign = False
        elif "postgres" in stat[: stat.rfind(")")]:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = ""
            if cmd.startswith("postgres:"):
                words = cmd.split(":", 2)[-1].split()
                # a backend reads "user dbname host(port) state"; aux processes have no db name
                foreign = len(words) >= 3 and not words[1].startswith("bench_")
            elif "/postgres" in cmd or cmd.startswith("postgres"):
                foreign = False  # the postmaster
        out[pid] = (ticks, foreign)
    return out


class Meter:
    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.foreign_ticks = 0
        self._prev = _scan()
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        cur = _scan()
        for pid, (ticks, foreign) in cur.items():
            if not foreign:
                continue
            before = self._prev.get(pid)
            # a pid unseen at the previous scan started since: all its CPU time is new
            self.foreign_ticks += ticks - before[0] if before else ticks
        self._prev = cur

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._tick()

    def stop(self) -> float:
        """Foreign CPU in cores over the meter's lifetime."""
        self._stop.set()
        self._thread.join(2)
        self._tick()
        elapsed = max(time.monotonic() - self._t0, 1e-3)
        return self.foreign_ticks / _TICK / elapsed
