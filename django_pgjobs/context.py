"""What a handler receives: the job's inputs and a few ways to talk back."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

from . import progress as progress_rules


class JobContext:
    """A running job, as a handler sees it.

    Read ``job.config`` (immutable inputs), ``job.attempts`` (1 on the first run),
    ``job.id``, ``job.type``, ``job.queue``, ``job.trace_id``, ``job.tenant_id``. Report per-item
    problems with :meth:`add_item_error`; the job then ends COMPLETED_WITH_ERRORS with them in
    ``result["errors"]``. Check :attr:`cancel_requested` in long loops (refreshed by the
    heartbeat) and, when it turns true, ``raise Cancelled()`` (the job ends CANCELLED). Report
    how far a long run got with :meth:`progress`.
    """

    __slots__ = (
        "id",
        "type",
        "queue",
        "priority",
        "config",
        "attempts",
        "max_attempts",
        "trace_id",
        "tenant_id",
        "created_at",
        "worker_id",
        "_lease",
        "_cancel_requested",
        "_lease_lost",
        "_lease_until",
        "item_errors",
        "_progress",
        "_on_progress",
        "has_dependants",
    )

    def __init__(
        self,
        *,
        id: int,
        type: str,
        queue: str,
        priority: int,  # noqa: A002
        config: dict[str, Any],
        attempts: int,
        max_attempts: int,
        trace_id: str | None,
        tenant_id: str | None,
        created_at: datetime,
        worker_id: str,
        lease_token: UUID | str,
        cancel_requested: bool = False,
        lease_until: float = math.inf,
        has_dependants: bool = True,
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
        self._lease_until = lease_until  # monotonic: the lease surely holds until then
        self.item_errors: list[dict[str, Any]] = []
        self._progress: tuple[Any, Any, str | None, float] | None = None  # + time.monotonic()
        # The worker's ProgressWriter.report: writes it later, on the worker's connection.
        self._on_progress: Callable[[JobContext], None] | None = None
        # Some job waited for this one when it was claimed: its finalize carries the fan-in.
        self.has_dependants = has_dependants

    @property
    def lease_token(self) -> UUID:
        """The token of this run's lease: the worker's writes to the job carry it."""
        return UUID(self._lease)

    @property
    def lease_text(self) -> str:
        """The lease token as text, as the worker's statements send it back."""
        return self._lease

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

    # --- the worker's side: set by the worker only (leases.py, producer.py, completer.py) ---

    @property
    def lease_until(self) -> float:
        """Monotonic: by the worker's clock the lease surely holds until then."""
        return self._lease_until

    @property
    def lease_marked_lost(self) -> bool:
        """The worker marked the lease lost (the database said so, or it ran out by our clock)."""
        return self._lease_lost

    def renewed(self, until: float) -> None:
        """The heartbeat renewed the lease: it holds until ``until``. A lost lease stays lost."""
        if self._lease_until > time.monotonic():
            self._lease_until = until

    def lose_lease(self) -> None:
        self._lease_lost = True

    def set_cancel_requested(self, flag: bool) -> None:
        self._cancel_requested = flag

    def attach_progress(self, report: Callable[[JobContext], None]) -> None:
        """While it runs, each progress report is handed to ``report`` (the ProgressWriter)."""
        self._on_progress = report

    def detach_progress(self) -> None:
        """The run ended: its last progress travels with its outcome."""
        self._on_progress = None

    @property
    def progress_attached(self) -> bool:
        return self._on_progress is not None

    # --- the handler's side ---

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the run got: ``done`` of ``total`` (None: unknown), and a short note.

        Cheap: it only remembers the value; the worker writes the latest one at most about once
        a second, on its own connection, and the last one with the job's outcome. A bad value
        (negative, NaN, ``done > total``, a note over 200 characters, not a number) raises
        :class:`~django_pgjobs.exceptions.InvalidProgress` and records nothing.
        """
        done, total, note = progress_rules.check(done, total, note)
        self._progress = (done, total, note, time.monotonic())
        if self._on_progress is not None:
            self._on_progress(self)

    def progress_record(self, now: float | None = None) -> dict[str, Any] | None:
        """The last report as the worker sends it (None: nothing reported)."""
        if self._progress is None:
            return None
        done, total, note, at = self._progress
        return progress_rules.record(done, total, note, (now or time.monotonic()) - at)

    def add_item_error(self, item: Any = None, error: Any = "", **details: Any) -> None:
        """Record that one item of the job failed while the rest went on."""
        entry: dict[str, Any] = {"item": item, "error": str(error)}
        entry.update(details)
        self.item_errors.append(entry)

    # --- workflows: what this job's dependencies left (read when asked, never copied) ---

    def upstream(self, step: str) -> dict[str, Any]:
        """The result of this job's dependency ``step`` (one indexed read); LookupError if it
        has none of that step, ValueError if the step is a group (see upstream_results)."""
        found = _workflow_sql().upstream(self.id, step, limit=2, using=_queue_database())
        if not found:
            raise LookupError(f"job {self.id} has no dependency of step {step!r}")
        if len(found) > 1:
            raise ValueError(f"step {step!r} is a group: read it with upstream_results({step!r})")
        return found[0][3]

    def upstream_results(self, step: str | None = None, page: int = 1000) -> Iterator[Any]:
        """The results of this job's dependencies (of ``step``), by job id, read ``page`` at a
        time: a group of any size without holding it in memory."""
        after = 0
        while True:
            rows = _workflow_sql().upstream(
                self.id, step, after=after, limit=page, using=_queue_database()
            )
            yield from (r[3] for r in rows)
            if len(rows) < page:
                return
            after = rows[-1][0]

    @property
    def dependencies(self) -> dict[str, list[int]]:
        """This job's dependencies' ids by outcome (COMPLETED, FAILED, ..., open)."""
        return _workflow_sql().dependencies(self.id, using=_queue_database())

    def __repr__(self) -> str:
        return f"<JobContext {self.type}#{self.id} attempt {self.attempts}/{self.max_attempts}>"


def _workflow_sql() -> Any:
    from .sql import workflows

    return workflows


def _queue_database() -> str:
    from . import conf

    return str(conf.get("DATABASE"))
