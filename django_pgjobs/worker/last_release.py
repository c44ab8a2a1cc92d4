"""The second SIGTERM/SIGINT's last act: every job this process still holds goes back to the
queue in one statement (queries.release, attempt refunded as at the shutdown timeout:
docs/guarantees.md), bounded so that the process exits within about two seconds even when the
database cannot be reached; what it could not release the reaper rescues when the lease
expires."""

from __future__ import annotations

import logging
import threading

from django.db import connections, transaction

from .. import queries
from .slots import DONE, QUEUED, STARTED, Slots

logger = logging.getLogger("django_pgjobs.worker")

STATEMENT_TIMEOUT_MS = 1000  # the release statement's own bound on the server
WAIT = 1.5  # seconds the exit waits for it at most (connecting included)


def release_held(slots: Slots, using: str, reason: str) -> int | None:
    """Release the jobs held in ``slots``; the number released, None if it did not finish in
    time or failed (logged). On a thread of its own: a connection of its own, never the one
    the interrupted main thread may be in the middle of using."""
    leases = [
        (i.job.id, i.job.lease_text) for i in slots.all() if i.state in (QUEUED, STARTED, DONE)
    ]
    if not leases:
        return 0
    released: list[int] = []
    thread = threading.Thread(
        target=_release,
        args=(leases, using, reason, released),
        name="pgjobs-last-release",
        daemon=True,
    )
    thread.start()
    thread.join(WAIT)
    if not released:
        logger.error(
            "could not release %s jobs within %.1fs: they are rescued when their lease expires",
            len(leases),
            WAIT,
            extra={"action": "worker.not_released"},
        )
        return None
    logger.warning(
        "released %s of the %s jobs this worker held",
        released[0],
        len(leases),
        extra={"action": "worker.released_at_exit"},
    )
    return released[0]


def _release(leases: list[tuple[int, str]], using: str, reason: str, out: list[int]) -> None:
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cur:
            cur.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
            out.append(len(queries.release(leases, reason=reason, using=using)))
    except Exception as exc:  # noqa: BLE001 - the process exits either way
        logger.error(
            "could not release the jobs this worker held (%s: %s)",
            exc.__class__.__name__,
            " ".join(str(exc).split())[:300],
            extra={"action": "worker.release_error"},
        )
