"""What a handler receives: the job's inputs and a few ways to talk back."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any
from uuid import UUID


class JobContext:
    """A running job, as a handler sees it.

    Read ``job.config`` (immutable inputs), ``job.attempts`` (1 on the first run),
    ``job.id``, ``job.type``, ``job.queue``, ``job.trace_id``, ``job.tenant_id``. Report per-item
    problems with :meth:`add_item_error`; the job then ends COMPLETED_WITH_ERRORS with them in
    ``result["errors"]``. Check :attr:`cancel_requested` in long loops (refreshed by the
    heartbeat) and return early when it turns true.
    """

    __slots__ = (
        "id", "type", "queue", "priority", "config", "attempts", "max_attempts", "trace_id",
        "tenant_id", "created_at", "worker_id", "_lease", "_cancel_requested",
        "_lease_lost", "_lease_until", "item_errors",
    )

    def __init__(
        self, *, id: int, type: str, queue: str, priority: int,  # noqa: A002
        config: dict[str, Any], attempts: int, max_attempts: int, trace_id: str | None,
        tenant_id: str | None, created_at: datetime, worker_id: str, lease_token: UUID | str,
        cancel_requested: bool = False,
    ):
        self.id = id
        self.type = type
        self.queue = queue
        self.priority = priority
        self.config = config
        self.attempts = attempts
        self.max_attempts = max_attempts
        self.trace_id = trace_id
        self.tenant_id = tenant_id
        self.created_at = created_at
        self.worker_id = worker_id
        # The token as text: what the worker's statements send back (no str() per job).
        self._lease = str(lease_token)
        self._cancel_requested = cancel_requested
        self._lease_lost = False  # the database said so, or the lease keeper noticed
        self._lease_until = math.inf  # monotonic: the lease surely holds until then
        self.item_errors: list[dict[str, Any]] = []

    @property
    def lease_token(self) -> UUID:
        """The token of this run's lease: the worker's writes to the job carry it."""
        return UUID(self._lease)

    @property
    def attempt(self) -> int:
        return self.attempts

    @property
    def is_last_attempt(self) -> bool:
        return self.attempts >= self.max_attempts

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked to cancel this job (seen at the next heartbeat)."""
        return self._cancel_requested

    @property
    def lease_lost(self) -> bool:
        """True when the worker no longer holds the job: stop, your result will be discarded.
        Also true, by the worker's own clock, once the lease was not renewed within its length
        (a worker cut off from the database): by then another worker may run the job."""
        return self._lease_lost or time.monotonic() >= self._lease_until

    def add_item_error(self, item: Any = None, error: Any = "", **details: Any) -> None:
        """Record that one item of the job failed while the rest went on."""
        entry: dict[str, Any] = {"item": item, "error": str(error)}
        entry.update(details)
        self.item_errors.append(entry)

    def __repr__(self) -> str:
        return f"<JobContext {self.type}#{self.id} attempt {self.attempts}/{self.max_attempts}>"
