"""Shared-memory probe called at the start of every benchmark job handler (stdlib only).

Every system's no-op handler calls ``hit(seq)`` first.  The probe writes, into a slot
of a small file in /dev/shm that the orchestrator (and the pickup producer) map:

    pid, count, first_ns, last_ns, last_seq      (5 x int64, little endian, 64-byte slots)

Times are CLOCK_MONOTONIC (``time.monotonic_ns()``; node's ``process.hrtime.bigint()``
reads the same clock), so the orchestrator can compare them across processes without
touching the database while a drain runs.  A Python process claims a free slot
(0..PY_SLOTS-1) under flock on first use; node workers get a fixed slot from the
BENCH_PROBE_SLOT environment variable.  Cost per call: about a microsecond.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
import time

SLOT_SIZE = 64
SLOTS = 64
PY_SLOTS = 48  # slots 48..63 are handed out explicitly (node workers)
FILE_SIZE = SLOT_SIZE * SLOTS
_FMT = "<5q"
_ENV = "BENCH_PROBE_FILE"


def create(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"\0" * FILE_SIZE)


class _Writer:
    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, FILE_SIZE)
            fixed = os.environ.get("BENCH_PROBE_SLOT")
            if fixed is not None:
                self.slot = int(fixed)
            else:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    for s in range(PY_SLOTS):
                        if struct.unpack_from("<q", self.mm, s * SLOT_SIZE)[0] == 0:
                            self.slot = s
                            break
                    else:
                        raise RuntimeError("probe: no free slot")
                    struct.pack_into("<q", self.mm, self.slot * SLOT_SIZE, self.pid)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        self.off = self.slot * SLOT_SIZE
        struct.pack_into("<q", self.mm, self.off, self.pid)
        self.count = 0
        self.first = 0

    def hit(self, seq: int) -> None:
        now = time.monotonic_ns()
        with self.lock:
            self.count += 1
            if not self.first:
                self.first = now
            # last_ns is written before last_seq: a reader that sees the seq sees its time
            struct.pack_into("<3q", self.mm, self.off + 8, self.count, self.first, now)
            struct.pack_into("<q", self.mm, self.off + 32, seq)


_writer: _Writer | None = None
_init_lock = threading.Lock()


def hit(seq) -> None:
    """Record that a handler started for job number ``seq`` (no-op without BENCH_PROBE_FILE)."""
    global _writer
    w = _writer
    if w is None or w.pid != os.getpid():  # first call, or we are a forked child
        path = os.environ.get(_ENV)
        if not path:
            return
        with _init_lock:
            if _writer is None or _writer.pid != os.getpid():
                _writer = _Writer(path)
            w = _writer
    try:
        seq = int(seq)
    except (TypeError, ValueError):
        seq = -1
    w.hit(seq)


class Reader:
    """Read side, used by the orchestrator and by the pickup producers."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self.mm = mmap.mmap(fd, FILE_SIZE, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def slots(self) -> list[tuple[int, int, int, int, int]]:
        out = []
        for s in range(SLOTS):
            row = struct.unpack_from(_FMT, self.mm, s * SLOT_SIZE)
            if row[0] or row[1]:
                out.append(row)
        return out

    def total(self) -> int:
        return sum(r[1] for r in self.slots())

    def first_ns(self) -> int | None:
        firsts = [r[2] for r in self.slots() if r[2]]
        return min(firsts) if firsts else None

    def last_ns(self) -> int | None:
        lasts = [r[3] for r in self.slots() if r[3]]
        return max(lasts) if lasts else None

    def seen(self, seq: int) -> int | None:
        """Handler start time (monotonic ns) of job ``seq`` if it is the latest in any slot."""
        for s in range(SLOTS):
            base = s * SLOT_SIZE
            if struct.unpack_from("<q", self.mm, base + 32)[0] == seq:
                return struct.unpack_from("<q", self.mm, base + 24)[0]
        return None

    def close(self) -> None:
        self.mm.close()
