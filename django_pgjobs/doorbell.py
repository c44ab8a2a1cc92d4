"""The doorbell: enqueue sends NOTIFY only while a worker of its queue sleeps; no wakeup is lost.

PostgreSQL serializes the commits of transactions that sent a NOTIFY (one database-wide lock),
so one NOTIFY per enqueue caps many producers. Advisory locks per channel decide instead:

    S(q)  "sleepers of q"  a sleeping worker holds it SHARED for each queue q it serves,
    S(*)  "sleepers of *"  or S(*) when it serves every queue; session-level, on its LISTEN
                           connection (a dead connection releases them: nobody to ring for)
    G     "gate"           a producer holds it SHARED until its transaction ends

Producer of a job on queue q, inside its INSERT (RING_SQL, a CASE: evaluated in this order,
lazily):
    1. try G shared for the transaction; failing means a worker is passing the gate right now
       (it has armed S already): ring;
    2. probe S(*), then S(q): try it exclusively; got it = nobody sleeps there: release it at
       once, go on; else ring (a failed try is tried once more first: another producer's probe
       holds it for a few microseconds, a sleeper for good).
Worker going to sleep, on its LISTEN connection (ARM_SQL, then GATE_SQL until it passes):
    1. take S shared (each of its queues, or *); 2. pass the gate: try G exclusively and release
    it at once (fails while any producer holds G: tried again every millisecond, producers never
    wait for it); 3. claim once more (main connection); 4. only if nothing came, sleep; on
    waking, release S.
Why nothing is lost: a producer that probed S before step 1 still holds G until its commit is
visible (locks are released after the commit), so step 2 passes only after that commit and
step 3 sees its job; a producer whose job the worker would run (its queue is one of the
worker's, or the worker serves all) and that probes after step 1 finds S(q) or S(*) taken and
rings, and the notification reaches the LISTEN connection that holds it. A producer of another
queue finds neither taken and does not ring: that worker would not run its job. Two producers
probing the same S at the same moment may both ring (one is enough): a false alarm costs one
NOTIFY, never a lost job; so does a collision of two queues' hashes.
"""

from __future__ import annotations

import zlib

from psycopg import sql

_SLEEPERS = 0x706A_0001  # first half of the two-int advisory key ("pj" 1); the other: the channel
_GATE = 0x706A_0002


def _int4(text: str) -> int:
    key = zlib.crc32(text.encode("utf-8"))
    return key - (1 << 32) if key >= 1 << 31 else key


def channel_key(channel: str) -> int:
    """The channel's half of the advisory keys (a signed int4), so channels do not share locks;
    S(*) and G are (_SLEEPERS, channel_key) and (_GATE, channel_key)."""
    return _int4(channel)


def queue_class(channel: str) -> int:
    """The first half of S(q) on ``channel``; the second is ``hashtext(q)``, computed by the
    server on both sides (a producer knows its queue as a column of the row)."""
    return _int4(f"pgjobs-queue:{channel}")


def _probe(cls: int, key: str) -> str:
    """CASE branches: ring when S (cls, key) is held by someone else; else release it, go on."""
    lock = f"pg_try_advisory_lock({cls}, {key})"
    return (
        f" WHEN NOT (CASE WHEN {lock} THEN true ELSE {lock} END) THEN true"  # held
        f" WHEN NOT pg_advisory_unlock({cls}, {key}) THEN true"  # got once: release it
    )


def ring_sql(channel: str, due: str, queue: str, param: str = "%s") -> str:
    """The NOTIFY on ``channel`` (the parameter ``param``) when ``due`` holds and a worker of
    the row's queue sleeps, else NULL; ``due`` and ``queue`` are SQL expressions of the row."""
    k = channel_key(channel)
    ring = (
        f"CASE WHEN NOT ({due}) THEN false"
        f" WHEN NOT pg_try_advisory_xact_lock_shared({_GATE}, {k}) THEN true"
        + _probe(_SLEEPERS, str(k))
        + _probe(queue_class(channel), f"hashtext({queue})")
        + " ELSE false END"
    )
    return f"CASE WHEN {ring} THEN pg_notify({param}, {queue})::text END"


def arm_sql(channel: str, queues: list[str] | None = None) -> str:
    """Take S shared for each of ``queues``, or S(*) for a worker of every queue (None); true
    when all are taken."""
    k = channel_key(channel)
    if not queues:
        return f"SELECT pg_try_advisory_lock_shared({_SLEEPERS}, {k})"
    return (
        sql.SQL(
            "SELECT bool_and(pg_try_advisory_lock_shared({}, hashtext(q))) FROM unnest({}::text[]) AS q"
        )
        .format(queue_class(channel), sql.Literal(sorted(set(queues))))
        .as_string(None)
    )


def gate_sql(channel: str) -> str:
    """Pass the gate: true when no producer holds G (G is released at once)."""
    k = channel_key(channel)
    return (
        f"SELECT CASE WHEN pg_try_advisory_lock({_GATE}, {k})"
        f" THEN pg_advisory_unlock({_GATE}, {k}) ELSE false END"
    )


DISARM_SQL = "SELECT pg_advisory_unlock_all()"  # the LISTEN connection holds no other lock
