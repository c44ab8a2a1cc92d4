"""The producer: claims jobs for the free slots and hands them to the executor threads.

A claim fills the free threads and, while every job held is of a type that runs short, up to
``prefetch`` more, which wait in the handoff for a thread: a drain of short jobs then refills
the threads' queue before it runs dry, and a round trip carries up to ``batch_size`` jobs
instead of one per free thread. Controlled queues (a cap, per-key limit or rate:
docs/flow-control.md) are claimed first, all of them in one short transaction that also
writes the ended runs (one round trip), and only for free threads (a held job would count
against the limits).
The outcomes that ride in a claim's round trip are written through the completer
(completer.write_with_claim; completer.py says who writes a job's outcome).

``async def`` handlers run on the worker's event loop (aio.py), with their own limit: the same
claim fills free threads and free async slots, asking only for the kinds that have room.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import flow, queries, registry
from ..context import JobContext
from ..queries import ClaimedRow, Completion
from ..registry import HandlerSpec
from ..status import JobStatus
from . import completer
from .handoff import Handoff
from .options import WorkerOptions
from .slots import DONE, STARTED, InFlight, Slots

if TYPE_CHECKING:
    from .aio import AsyncRuntime

logger = logging.getLogger("django_pgjobs.worker")

NO_CONTROLS = flow.FlowSettings()  # a queue controlled by its row alone
RUNS_LONG = 0.05  # seconds after which a run in progress stops counting as short (prefetch)
HOLD_MAX = 0.5  # seconds prefetched jobs may wait while every thread is busy before release


class Producer:
    def __init__(
        self,
        worker_id: str,
        options: WorkerOptions,
        slots: Slots,
        handoff: Handoff[InFlight],
        finished: Callable[[InFlight, Completion], int],
    ):
        self.worker_id = worker_id
        self.options = options
        self.slots = slots
        self.handoff = handoff
        self.finished = finished  # the completer's put(): a job failed without running
        self.types: list[str] = []  # set at start: the registered types
        self.aio: AsyncRuntime | None = None  # the event loop of async handlers (not inline)
        # What the next claim asks for (room()): (types, room) on threads, then on the loop.
        self._lines: tuple[list[str], int, list[str], int] = ([], 0, [], 0)
        self._free_threads = 0
        self.limited: list[str] = []  # our queues with a cluster-wide cap (QueueControls)
        self.claimed_total = 0
        self.last_claim_full = False  # the batch size, not the room, capped the last claim
        self._last_claim_short = False  # every type in the last non-empty claim runs short
        self._tenant_cursor: str | None = None
        self._key_cursor: dict[str, str | None] = {}  # per controlled queue: last key served
        self.next_start_at: float | None = None  # monotonic: a held rate's next start
        self._claim_sent = 0.0  # monotonic, before the last claim: its leases hold until + lease

    def room(self, ending: int) -> tuple[int, int]:
        """(free threads, jobs the next claim may take) once ``ending`` runs are written."""
        o = self.options
        free = o.concurrency - len(self.slots) + ending - self.slots.zombies
        prefetch = o.prefetch if o.prefetch and not o.inline and self._prefetching() else 0
        room = free + prefetch
        self._lines = (self.types, room, [], 0)
        self._free_threads = free
        if self.aio is not None:
            free, room = self._room_by_kind(ending, prefetch)
        if o.max_jobs is not None:
            room = min(room, o.max_jobs - self.claimed_total)
        return free, room

    def _room_by_kind(self, ending: int, prefetch: int) -> tuple[int, int]:
        """room() with the event loop: threads and async slots counted apart, and the next
        claim asks only for the types of a kind with room. Ended async runs not yet written
        count as in the batch: a lower bound of the free threads, never above it."""
        assert self.aio is not None  # noqa: S101
        s, aio = self.slots, self.aio
        ended_async = s.n_async - aio.active
        threads = self.options.concurrency - (len(s) - s.n_async) - s.zombies
        threads += max(0, ending - ended_async)
        free_async = aio.free()
        sync_types, async_types = aio.split_types(self.types)
        thread_room = threads + prefetch if threads > 0 and sync_types else 0
        async_room = free_async if async_types else 0
        self._lines = (sync_types, thread_room, async_types, max(0, async_room))
        self._free_threads = max(0, threads) if sync_types else 0
        # Free async slots count as free (the doorbell stays armed) once async jobs ran here.
        counted = max(0, free_async) if aio.typical is not None else 0
        return max(0, threads) + counted, thread_room + max(0, async_room)

    def finalize_and_claim_limited(
        self, completions: list[Completion], free: int
    ) -> tuple[set[int], list[ClaimedRow]]:
        """Write ``completions`` and claim from every controlled queue of ours in one round
        trip, for free threads only (a held job would count against the limits); then, if
        async handlers have free slots, for those in another. A queue held by its rate says
        when its next start is allowed (next_start_at). The rows are not yet dispatched."""
        self.next_start_at = None
        self._claim_sent = time.monotonic()  # the first trip's: the leases' earliest start
        sync_types, thread_room, async_types, async_room = self._lines
        written, threads = self._claim_limited(
            completions, sync_types, min(free, self._free_threads)
        )
        on_loop: list[ClaimedRow] = []
        if async_types and async_room > 0:  # and for free async slots (aio.py)
            on_loop = self._claim_limited([], async_types, async_room)[1]
        # what is left of each line's room is the main claim's (finalize_and_claim)
        self._lines = (
            sync_types,
            thread_room - len(threads),
            async_types,
            async_room - len(on_loop),
        )
        return written, threads + on_loop

    def _claim_limited(
        self, completions: list[Completion], types: list[str], free: int
    ) -> tuple[set[int], list[ClaimedRow]]:
        declared = flow.queues()
        wanted = [
            queries.ControlledQueue(
                name, declared.get(name, NO_CONTROLS), self._key_cursor.get(name)
            )
            for name in self.limited
        ]
        written, got = queries.finalize_and_claim_controlled(
            completions,
            wanted,
            worker_id=self.worker_id,
            types=types,
            limit=free,
            lease_seconds=self.options.lease_seconds,
            using=self.options.using,
        )
        rows: list[ClaimedRow] = []
        left = free
        for q, claim in sorted(zip(wanted, got, strict=True), key=lambda p: p[0].name):
            if left > 0:  # a queue the ones before it left no room got no turn: cursor kept
                keys = [r.flow_key for r in claim.rows if r.flow_key is not None]
                # a full claim: the next one starts after the last key served (each key its turn)
                full = bool(keys) and len(claim.rows) == left
                self._key_cursor[q.name] = max(keys) if full else None
            if claim.next_start_in is not None:
                at = self._claim_sent + claim.next_start_in
                self.next_start_at = min(at, self.next_start_at or at)
            rows += claim.rows
            left -= len(claim.rows)
        return written, rows

    def until_next_start(self, now: float) -> float:
        """Seconds until a rate-held queue allows its next start (inf: none is held)."""
        return float("inf") if self.next_start_at is None else max(0.0, self.next_start_at - now)

    def finalize_and_claim(
        self, completions: list[Completion], limit: int
    ) -> tuple[set[int], list[ClaimedRow]]:
        """Write ``completions`` and claim up to ``limit`` jobs, in one round trip."""
        o = self.options
        self._claim_sent = time.monotonic()
        sync_types, thread_room, async_types, async_room = self._lines
        async_limit = min(async_room, limit)  # each line up to the limit (the batch size)
        written, rows = completer.write_with_claim(  # no round trip when there is nothing to do
            completions,
            worker_id=self.worker_id,
            types=sync_types,
            async_types=async_types,
            async_limit=async_limit,
            queues=o.queues,
            limit=min(thread_room, limit),
            lease_seconds=o.lease_seconds,
            fair=o.fair_share,
            after_tenant=self._tenant_cursor,
            using=o.using,
        )
        if o.fair_share and limit > 0:  # next claim starts after the last tenant served
            tenants = [r.tenant_id for r in rows if r.tenant_id is not None]
            self._tenant_cursor = max(tenants) if len(rows) == limit and tenants else None
        return written, rows

    def dispatch(self, rows: list[ClaimedRow]) -> None:
        """Hand claimed jobs to the executor threads (or run them here when inline)."""
        if not rows:
            return
        self.claimed_total += len(rows)
        self._last_claim_short = all(self.handoff.is_short(t) for t in {r.type for r in rows})
        items = self._items(rows)
        self.slots.add(items)
        handoff = []
        for row, item in zip(rows, items, strict=True):
            if row.config_error is not None:  # written by raw SQL: fail the job, run nothing
                item.state = DONE
                self.finished(
                    item,
                    Completion(
                        id=row.id,
                        token=row.lease_token,
                        attempt=row.attempts,
                        status=JobStatus.FAILED,
                        error=row.config_error,
                        note="failed",
                        fan_in=row.has_dependants,
                    ),
                )
            elif self.aio is not None and item.spec.is_async:
                self.aio.submit(item)
            else:
                handoff.append((row.type, item))
        self.handoff.put_many(handoff)

    def _items(self, rows: list[ClaimedRow]) -> list[InFlight]:
        now = time.monotonic()
        handlers: dict[str, tuple[HandlerSpec, float | None]] = {}  # per type, once per batch
        items = []
        for row in rows:
            handler = handlers.get(row.type)
            if handler is None:
                spec = registry.get(row.type)
                assert spec is not None  # the claim only takes registered types  # noqa: S101
                handler = handlers[row.type] = (spec, spec.effective_timeout())
            spec, timeout = handler
            job = job_context(row, self.worker_id, self._claim_sent + self.options.lease_seconds)
            items.append(InFlight(job, spec, deadline=(now + timeout) if timeout else None))
        return items

    def _prefetching(self) -> bool:
        """May this claim take more jobs than free threads? Only while every job held is of a
        type that usually runs short (Handoff.is_short) and none has been running for long:
        then the jobs held get a thread within moments. ``release_held`` covers the rest."""
        now = time.monotonic()
        items = self.slots.all()
        if not items:
            return self._last_claim_short
        kinds = set()
        for item in items:
            if item.state == STARTED and now - item.started_at > RUNS_LONG:
                return False
            kinds.add(item.job.type)
        return all(self.handoff.is_short(k) for k in kinds)

    def release_held(self) -> None:
        """Give back claimed jobs that wait for a thread while every thread is busy and none
        has taken a job for HOLD_MAX: prefetched jobs held behind runs that turned out long.
        Other workers (or this one, later) claim them again; the attempt is refunded."""
        waited = self.handoff.stuck_for()
        if waited < HOLD_MAX:
            return
        items = self.handoff.take_back()
        try:
            n = self.give_back(items, reason="released unstarted: every worker thread was busy")
        except BaseException:  # still ours: queue them again, in their order
            self.handoff.put_many([(i.job.type, i) for i in items])
            raise
        if n:
            logger.info(
                "released %s claimed jobs that waited %.1fs for a thread: every thread is busy",
                n,
                waited,
                extra={"action": "worker.released_held"},
            )

    def give_back(self, items: list[InFlight], *, reason: str) -> int:
        """Release those of ``items`` that no thread has started (attempt refunded); returns
        how many. On a database error they are still ours: QUEUED again, and it raises."""
        released = self.slots.release(items)
        if not released:
            return 0
        try:
            queries.release(
                [(i.job.id, i.job.lease_text) for i in released],
                reason=reason,
                using=self.options.using,
            )
        except BaseException:
            self.slots.unrelease(released)
            raise
        self.slots.remove([i.job.id for i in released])
        return len(released)


def job_context(row: ClaimedRow, worker_id: str, lease_until: float) -> JobContext:
    """What a handler sees of a claimed row; by the worker's clock its lease holds until
    ``lease_until`` (monotonic)."""
    return JobContext(
        id=row.id,
        type=row.type,
        queue=row.queue,
        priority=row.priority,
        config=row.config,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        trace_id=row.trace_id,
        tenant_id=row.tenant_id,
        created_at=row.created_at,
        worker_id=worker_id,
        lease_token=row.lease_token,
        cancel_requested=row.cancel_requested,
        lease_until=lease_until,
        has_dependants=row.has_dependants,
    )
