"""The doorbell: enqueue sends NOTIFY only while some worker sleeps, and no wakeup is lost.

PostgreSQL serializes the commits of transactions that sent a NOTIFY (one database-wide lock),
so one NOTIFY per enqueue caps many producers. Two advisory locks per channel decide instead:

    S  "sleepers"  a sleeping worker holds it SHARED, session-level, on its LISTEN connection
                   (a dead connection releases it: nobody listens, nobody to ring for)
    G  "gate"      a producer holds it SHARED until its transaction ends

Producer, inside its INSERT (RING_SQL, a CASE: evaluated in this order, lazily):
    1. try G shared for the transaction; failing means a worker is passing the gate right now
       (it has armed S already): ring;
    2. probe S: try it exclusively; got it = nobody sleeps: release it at once, no ring;
       else ring.
Worker going to sleep, on its LISTEN connection (ARM_SQL, then GATE_SQL until it passes):
    1. take S shared; 2. pass the gate: try G exclusively and release it at once (fails while
    any producer holds G: tried again every millisecond, producers never wait for it);
    3. claim once more (main connection); 4. only if nothing came, sleep; on waking, release S.
Why nothing is lost: a producer that probed S before step 1 still holds G until its commit is
visible (locks are released after the commit), so step 2 passes only after that commit and
step 3 sees its job; a producer that probes after step 1 finds S taken and rings, and the
notification reaches the LISTEN connection that holds S. Two producers probing S at the same
moment may both ring (one is enough): a false alarm costs one NOTIFY, never a lost job.
"""

from __future__ import annotations

import zlib

_SLEEPERS = 0x706A_0001  # first half of the two-int advisory key ("pj" 1); the other: the channel
_GATE = 0x706A_0002


def channel_key(channel: str) -> int:
    """The channel's half of the advisory keys (a signed int4), so channels do not share locks."""
    key = zlib.crc32(channel.encode("utf-8"))
    return key - (1 << 32) if key >= 1 << 31 else key


def ring_sql(channel: str, due: str, queue: str, param: str = "%s") -> str:
    """The NOTIFY on ``channel`` (the parameter ``param``) when ``due`` holds and a worker
    sleeps, else NULL; ``due`` and ``queue`` are SQL expressions of the inserted row."""
    k = channel_key(channel)
    ring = (
        f"CASE WHEN NOT ({due}) THEN false"
        f" WHEN NOT pg_try_advisory_xact_lock_shared({_GATE}, {k}) THEN true"
        f" WHEN pg_try_advisory_lock({_SLEEPERS}, {k})"
        f" THEN NOT pg_advisory_unlock({_SLEEPERS}, {k})"
        " ELSE true END"
    )
    return f"CASE WHEN {ring} THEN pg_notify({param}, {queue})::text END"


def arm_sql(channel: str) -> str:
    """Take S shared (a sleeper); true when taken."""
    k = channel_key(channel)
    return f"SELECT pg_try_advisory_lock_shared({_SLEEPERS}, {k})"


def gate_sql(channel: str) -> str:
    """Pass the gate: true when no producer holds G (G is released at once)."""
    k = channel_key(channel)
    return (
        f"SELECT CASE WHEN pg_try_advisory_lock({_GATE}, {k})"
        f" THEN pg_advisory_unlock({_GATE}, {k}) ELSE false END"
    )


DISARM_SQL = "SELECT pg_advisory_unlock_all()"  # the LISTEN connection holds no other lock
