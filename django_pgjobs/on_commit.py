"""enqueue_on_commit: a job that follows a commit on another database, once per key.

With the queue in its own database, ``enqueue()`` inside a transaction on your business
database commits on its own: the job could run for data that is then rolled back. This enqueues
after that transaction commits instead, and never twice for one key: calling it again with the
same key (a retry after a crash between the two commits, a periodic reconciler) finds the job
and adds nothing. What this does and does not guarantee: docs/guarantees.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import transaction

from . import conf, db
from .enqueue import _encode, _optional_text, _prepare, enqueue
from .exceptions import InvalidJobOption
from .tables import JOB_TABLE
from .tracing import current_trace_id

logger = logging.getLogger(__name__)

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended('pgjobs.key:' || %s, 0))"
# Any job with the key, by pgjobs_job_unique_key_idx. No ORDER BY id: with one, the planner may
# walk the primary key backwards through every job instead.
_FIND_KEY = f"SELECT id FROM {JOB_TABLE} WHERE unique_key = %s LIMIT 1"


def enqueue_on_commit(
    type: str,  # noqa: A002 - the job type
    config: Mapping[str, Any] | None = None,
    *,
    key: str,
    using: str,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | float | None = None,
    tenant_id: Any = None,
    operated_by: Any = None,
    max_attempts: int | None = None,
) -> None:
    """Enqueue once ``using``'s current transaction commits (at once outside one), unless a job
    with ``key`` exists in the queue's database, in any status.

    Everything is checked now, so bad input raises here, inside your transaction. On the queue's
    own alias the job is inserted at once, in the transaction (rolled back with it).
    """
    options = dict(
        queue=queue,
        priority=priority,
        run_after=run_after,
        trace_id=current_trace_id.get(),
        tenant_id=tenant_id,
        operated_by=operated_by,
        max_attempts=max_attempts,
    )
    if not _optional_text("key", key):
        raise InvalidJobOption("enqueue_on_commit needs a key (1-255 characters)")
    _prepare(type, unique_key=key, **options)  # raises what enqueue() would, before any SQL
    _encode(config)
    if using == conf.get("DATABASE"):
        enqueue_once(type, config, key=key, **options)
        return
    transaction.on_commit(partial(_after_commit, type, config, key, using, options), using=using)


def enqueue_once(
    type: str,
    config: Mapping[str, Any] | None = None,
    *,  # noqa: A002
    key: str,
    using: str | None = None,
    **options: Any,
) -> tuple[int, bool]:
    """(id, True) of a new job with ``key``, or (id, False) of a job that has it, in any
    status; concurrent calls with one key are serialized by an advisory lock on the key."""
    alias = using or conf.get("DATABASE")
    with transaction.atomic(using=alias), db.cursor(alias) as cur:
        cur.execute(_LOCK_KEY, [key])
        cur.execute(_FIND_KEY, [key])
        row = cur.fetchone()
        if row is not None:
            return row[0], False
        job = enqueue(type, config, unique_key=key, using=alias, **options)
        return job.id, not getattr(job, "deduplicated", False)


def _after_commit(
    type: str,
    config: Any,
    key: str,
    using: str,  # noqa: A002
    options: dict[str, Any],
) -> None:
    try:
        job_id, created = enqueue_once(type, config, key=key, **options)
    except Exception:
        logger.exception(
            "job not enqueued after the commit on %r (key %r): call "
            "enqueue_on_commit again with this key",
            using,
            key,
            extra={"action": "job.enqueue_after_commit_failed"},
        )
        raise
    logger.debug(
        "job %s %s after the commit on %r (key %r)",
        job_id,
        "enqueued" if created else "already there",
        using,
        key,
        extra={"action": "job.enqueued_after_commit"},
    )
