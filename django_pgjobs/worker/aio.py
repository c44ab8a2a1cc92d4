"""The async runtime: one long-lived event loop, on its own thread, runs the ``async def``
handlers of the jobs a worker claims, up to ``async_concurrency`` at once (docs/async.md).

    producer.dispatch --submit()--> backlog --(a free async slot)--> Task: _run(item)
    _run: slots.start, job_started, await the handler (_outcome), slots.finish, completer.put

The claim thread keeps what it does for threads: leases, heartbeats and the writing of every
outcome (completer.py). The loop only runs coroutines, and cancels them:

    timeout        at the type's timeout: the job fails with JobTimeout (retried by its policy)
    cancel         an operator's cancel request, seen by the heartbeat: the job ends CANCELLED
    lease lost     the outcome would be discarded anyway: stop spending on it
    shutdown       after the drain timeout (stop()): the job is released, its attempt refunded

A coroutine that ignores its cancel for CANCEL_GRACE is abandoned: its outcome is recorded as
the reason says, its slot is freed, a warning names it, and it runs on unwatched. A coroutine
that blocks the loop is named by the watchdog (loopwatch.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .. import registry, signals
from ..exceptions import Cancelled, JobTimeout, LeaseLost
from ..tracing import current_job_id, current_trace_id
from . import executor
from .completer import send_robust
from .loopwatch import LoopWatch
from .slots import InFlight

if TYPE_CHECKING:
    from .completer import Completer
    from .progress import ProgressWriter
    from .slots import Slots
    from .waiter import Waiter

logger = logging.getLogger("django_pgjobs.worker")

CANCEL_GRACE = 1.0  # seconds a cancelled coroutine gets to end before it is abandoned
TICK = 0.1  # seconds between two looks at the cancel requests and leases of running jobs
# Claimed ahead, beyond the limit, while the async jobs here usually end within AHEAD_UNDER
# seconds: a slot that frees takes the next job at once, not a round trip later. They wait in
# the backlog with their leases renewed, and a shutdown gives them back unstarted.
AHEAD_UNDER = 1.0
SHUTDOWN, TIMEOUT, CANCEL, LOST = "shutdown", "timeout", "cancel", "lease_lost"


class AsyncRuntime:
    def __init__(
        self,
        *,
        limit: int,
        slots: Slots,
        completer: Completer,
        progress: ProgressWriter,
        waiter: Waiter,
        wake: Callable[[], None],
    ) -> None:
        self.limit = limit
        self.slots = slots
        self.completer = completer
        self.progress = progress
        self.waiter = waiter
        self.wake = wake  # the claim loop's
        self.loop = asyncio.new_event_loop()
        self.watch = LoopWatch(self.loop, self._running_job)
        self._thread = threading.Thread(target=self._serve, name="pgjobs-aio", daemon=True)
        self._submitted = 0  # written by the claim thread only
        self._freed = 0  # written by the loop thread only: active = submitted - freed
        self._backlog: deque[InFlight] = deque()  # claimed, waiting for a free async slot
        self._tasks: dict[asyncio.Task[None], InFlight] = {}
        self._task_of: dict[InFlight, asyncio.Task[None]] = {}
        self._reasons: dict[InFlight, str] = {}  # why a run was cancelled
        self._freed_items: set[InFlight] = set()
        self._kinds: tuple[list[str], tuple[list[str], list[str]]] | None = None
        self.abandoned = 0  # coroutines that ignored their cancel and run on
        self.typical: float | None = None  # seconds an async run here usually takes (EWMA)

    # --- the claim thread's side -----------------------------------------------------------

    @property
    def active(self) -> int:
        """Async jobs submitted whose run has not ended (waiting, running, cancelling)."""
        return self._submitted - self._freed

    def free(self) -> int:
        """Jobs the next claim may take for the loop: its free slots and, while async runs
        are short here, up to half the limit more, held in the backlog (AHEAD_UNDER)."""
        short = self.typical is not None and self.typical < AHEAD_UNDER
        return self.limit + (self.limit // 2 if short else 0) - self.active

    def split_types(self, types: list[str]) -> tuple[list[str], list[str]]:
        """(sync types, async types) of ``types``: threads run the first, the loop the rest."""
        if self._kinds is None or self._kinds[0] is not types:
            specs = [(t, registry.get(t)) for t in types]
            sync = [t for t, s in specs if s is None or not s.is_async]
            self._kinds = (types, (sync, [t for t, s in specs if s is not None and s.is_async]))
        return self._kinds[1]

    def submit(self, item: InFlight) -> None:
        self._submitted += 1
        self.loop.call_soon_threadsafe(self._admit, item)

    def start(self) -> None:
        self._thread.start()
        self.watch.start()

    def stop(self, wait: float) -> None:
        """At the end of a shutdown: cancel what still runs (released by the caller, attempt
        refunded), give it ``wait`` seconds to end, then stop the loop and its thread."""
        if not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(self._cancel_all(wait), self.loop)
        try:
            done.result(wait + 1.0)
        except Exception:  # noqa: BLE001,S110 - the loop is stopped below regardless
            pass
        self.watch.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(2.0)

    # --- the loop thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._tick)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _admit(self, item: InFlight) -> None:
        if len(self._tasks) - self.abandoned >= self.limit:  # abandoned ones hold no slot
            self._backlog.append(item)
            return
        task = self.loop.create_task(self._run(item), name=f"pgjobs:{item.job.type}#{item.job.id}")
        self._tasks[task] = item
        self._task_of[item] = task
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        item = self._tasks.pop(task)
        del self._task_of[item]
        self._free(item)
        self._reasons.pop(item, None)
        if item in self._freed_items:  # an abandoned coroutine that ended at last
            self._freed_items.discard(item)
            self.abandoned -= 1
        self._fill()

    def _fill(self) -> None:
        """Start backlogged jobs while slots are free."""
        while self._backlog and len(self._tasks) - self.abandoned < self.limit:
            self._admit(self._backlog.popleft())

    def _free(self, item: InFlight) -> None:
        if item not in self._freed_items:
            self._freed += 1

    async def _run(self, item: InFlight) -> None:
        if not self.slots.start(item, time.monotonic()):  # released by a shutdown meanwhile
            return
        job = item.job
        job.attach_progress(self.progress.report)
        send_robust(signals.job_started, sender=job.type, job=job)
        timeout = item.spec.effective_timeout()
        timer = self.loop.call_later(timeout, self._cancel, item, TIMEOUT) if timeout else None
        completion = await self._outcome(item)
        if timer is not None:
            timer.cancel()
        took = time.monotonic() - item.started_at
        self.typical = took if self.typical is None else self.typical + (took - self.typical) / 4
        if completion is None:  # cancelled by the shutdown: released by it
            return
        if not self.slots.finish(item):  # abandoned: its outcome is written already
            self.wake()
            return
        if self.waiter.should_wake(self.completer.put(item, completion)):
            self.wake()

    async def _outcome(self, item: InFlight) -> Any:
        """The run's Completion; None when the shutdown cancelled it."""
        spec, job = item.spec, item.job
        trace_token, job_token = current_trace_id.set(job.trace_id), current_job_id.set(job.id)
        started = time.monotonic()
        try:
            coro: Coroutine[Any, Any, Any] = spec.func(job)
            value = _not_awaitable(spec.type, await coro)
        except BaseException as exc:  # noqa: BLE001 - a handler must never take the loop down
            reason = self._reasons.get(item)
            if reason == SHUTDOWN:
                return None
            return executor.outcome_of_error(spec, job, self._why(item, exc), _ms(started))
        finally:
            current_trace_id.reset(trace_token)
            current_job_id.reset(job_token)
        if item in self._reasons:  # swallowed its cancel, then returned: the reason stands
            if self._reasons[item] == SHUTDOWN:
                return None
            return executor.outcome_of_error(spec, job, self._why(item, None), _ms(started))
        return executor.outcome_of_return(job, value, _ms(started))

    def _why(self, item: InFlight, raised: BaseException | None) -> BaseException:
        """What ended the run: the handler's own error, or the reason it was cancelled (with
        what the handler raised while cancelling as its context)."""
        reason = self._reasons.get(item)
        if reason is None:
            assert raised is not None  # noqa: S101
            return raised
        if reason == TIMEOUT:
            why: BaseException = JobTimeout(
                f"handler ran longer than its timeout of {item.spec.effective_timeout()}s; "
                "its coroutine was cancelled"
            )
        elif reason == CANCEL:
            why = Cancelled("cancel requested: the coroutine was cancelled at its next await")
        else:
            why = LeaseLost(f"job {item.job.id}: the lease was lost; the coroutine was cancelled")
        if raised is not None and not isinstance(raised, asyncio.CancelledError):
            why.__context__ = raised  # "raised while cancelling" shows in the error
        return why

    def _cancel(self, item: InFlight, reason: str) -> None:
        task = self._task_of.get(item)
        if task is None or task.done() or item in self._reasons:
            return
        self._reasons[item] = reason
        task.cancel(reason)
        if reason != SHUTDOWN:
            self.loop.call_later(CANCEL_GRACE, self._check_ignored, task, item)

    def _check_ignored(self, task: asyncio.Task[None], item: InFlight) -> None:
        """A cancelled coroutine still running after CANCEL_GRACE: stop waiting for it."""
        if task.done() or item in self._freed_items:
            return
        reason = self._reasons.get(item, CANCEL)
        if self.slots.abandon(item):  # else the claim thread's timeout backstop did it
            why = self._why(item, None)
            outcome = executor.outcome_of_error(item.spec, item.job, why, _ms(item.started_at))
            outcome.error = (
                f"{outcome.error or ''}\n[django-pgjobs] the coroutine ignored its cancel "
                f"({reason}) for {CANCEL_GRACE:g}s; the worker stopped waiting for it"
            )
            self.completer.put(item, outcome)
            self.wake()
        self._free(item)
        self._freed_items.add(item)
        self.abandoned += 1
        self._fill()
        logger.warning(
            "job.cancel_ignored %s#%s: its coroutine swallowed CancelledError (%s) and still "
            "runs %.1fs later; recorded as %s, its async slot freed, the worker no longer "
            "waits for it",
            item.job.type,
            item.job.id,
            reason,
            CANCEL_GRACE,
            "timed out" if reason == TIMEOUT else "cancelled",
            extra={"action": "job.cancel_ignored", "job_id": item.job.id},
        )

    def _tick(self) -> None:
        """Cancel the runs an operator asked to cancel, or whose lease was lost."""
        for task, item in list(self._tasks.items()):
            if task.done() or item in self._reasons:
                continue
            if item.job.cancel_requested:
                self._cancel(item, CANCEL)
            elif item.job.lease_marked_lost:
                self._cancel(item, LOST)
        self.loop.call_later(TICK, self._tick)

    async def _cancel_all(self, wait: float) -> None:
        self._backlog.clear()
        tasks = list(self._tasks)
        for task in tasks:
            self._cancel(self._tasks[task], SHUTDOWN)
        if tasks:
            await asyncio.wait(tasks, timeout=wait)

    def _running_job(self) -> str | None:
        """The job whose coroutine holds the loop now (for the watchdog, any thread)."""
        frames = _frames_of(self._thread)
        while frames is not None:
            if frames.f_code is _OUTCOME_CODE:
                item = frames.f_locals.get("item")
                if isinstance(item, InFlight):
                    return f"{item.job.type}#{item.job.id}"
            frames = frames.f_back
        return None


_OUTCOME_CODE = AsyncRuntime._outcome.__code__


def _frames_of(thread: threading.Thread) -> Any:
    import sys

    return sys._current_frames().get(thread.ident or -1)  # noqa: SLF001


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def start_for(worker: Any) -> AsyncRuntime | None:
    """The runtime of a worker that has ``async def`` handlers, started and handed to its
    producer; None inline (run_jobs(): asyncio.run on the caller's thread) or without any."""
    o, producer = worker.options, worker.producer
    if o.inline or not producer.types:
        return None
    if not any((s := registry.get(t)) is not None and s.is_async for t in producer.types):
        return None
    runtime = AsyncRuntime(
        limit=o.async_concurrency,
        slots=worker.slots,
        completer=worker.completer,
        progress=worker.progress,
        waiter=worker.waiter,
        wake=worker.wake,
    )
    runtime.start()
    producer.aio = runtime
    logger.info(
        "event loop of async handlers started: async_concurrency=%s",
        o.async_concurrency,
        extra={"action": "worker.loop_started"},
    )
    return runtime


def _not_awaitable(job_type: str, value: Any) -> Any:
    """An async handler that returns an awaitable forgot an ``await``: fail the job, saying so."""
    return executor.refuse_awaitable(
        value,
        f"the async handler of {job_type!r} returned an awaitable ({type(value).__name__}) "
        "instead of its result: a missing `await` (write `return await ...`)",
    )
