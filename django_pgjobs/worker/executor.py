"""Run one handler and turn whatever happened into a Completion. Writes no job state itself:
a transactional handler's outcome is written inside its transaction by the completer's
finalize_in_transaction (completer.py says who writes a job's outcome)."""

from __future__ import annotations

import inspect
import logging
import threading
import time
import traceback
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.db.backends.signals import connection_created

from .. import conf, netsafety, retry
from ..context import JobContext
from ..exceptions import Fail, LeaseLost
from ..queries import Completion
from ..registry import HandlerSpec
from ..status import JobStatus
from ..tracing import current_job_id, current_trace_id
from .completer import finalize_in_transaction
from .storable import storable_json, storable_text

logger = logging.getLogger("django_pgjobs.worker")


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head - 60
    return f"{text[:head]}\n… [{len(text) - head - tail:,} characters truncated] …\n{text[-tail:]}"


def format_error(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return truncate(text, conf.get("MAX_ERROR_CHARS"))


def _call(spec: HandlerSpec, job: JobContext) -> Any:
    """On a thread: an ``async def`` handler only here without an event loop (run_jobs()),
    through async_to_sync, so that its sync_to_async calls use this thread's connection."""
    if spec.is_async:
        return async_to_sync(spec.func)(job)
    return _not_awaitable(spec, spec.func(job))


def _not_awaitable(spec: HandlerSpec, value: Any) -> Any:
    """A sync handler that returns an awaitable is a mistake: fail the job, saying so."""
    return refuse_awaitable(
        value,
        f"the handler of {spec.type!r} is a sync function that returned an awaitable "
        f"({type(value).__name__}); declare it `async def` so that the worker awaits it "
        "on its event loop (docs/async.md)",
    )


def refuse_awaitable(value: Any, message: str) -> Any:
    """``value``, unless it is an awaitable a handler returned by mistake: then Fail(message)."""
    if not inspect.isawaitable(value):
        return value
    if inspect.iscoroutine(value):
        value.close()  # never awaited: no RuntimeWarning at exit
    raise Fail(message)


def _result_patch(value: Any, job: JobContext) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object merged into job.result, or an error explaining why it cannot be stored."""
    if value is None:
        patch: dict[str, Any] = {}
    elif isinstance(value, dict):
        patch = value
    else:
        patch = {"value": value}
    if job.item_errors:
        patch = {**patch, "errors": job.item_errors}
    if not patch:
        return None, None
    try:
        patch, text = storable_json(patch)
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"handler returned a result that is not JSON ({exc}); nothing was stored"
    limit = conf.get("MAX_RESULT_BYTES")
    if len(text) > limit:
        return {"result_truncated": True, "result_bytes": len(text)}, None
    return patch, None


# Threads that ever opened a Django connection (connection_created): only those can have one
# a handler left broken or inside a transaction. Asking Django (connections.all(), through
# asgiref's Local) at every run costs more than most jobs that never touch the database.
_thread = threading.local()
IDLE_CHECK = 1.0  # seconds a thread with a connection rested before its next run checks it


def _opened(sender: Any, **kwargs: Any) -> None:
    _thread.opened = True


connection_created.connect(_opened, weak=False, dispatch_uid="django_pgjobs.executor.opened")


def execute(
    spec: HandlerSpec, job: JobContext, *, using: str | None = None, inline: bool = False
) -> Completion:
    """Call the handler and decide the job's next state. Catches everything, even SystemExit.

    ``inline``: the calling thread may be inside its own transaction (testing.run_jobs()),
    which must survive the job; an executor thread never is.
    """
    trace_token = current_trace_id.set(job.trace_id)
    job_token = current_job_id.set(job.id)
    started = time.monotonic()
    callers = _open_transactions() if inline else None
    if not inline and started - getattr(_thread, "ended", started) >= IDLE_CHECK:
        netsafety.close_dead(connections.all(initialized_only=True))
    try:
        if spec.transactional:
            return _execute_in_transaction(spec, job, started, using or conf.get("DATABASE"))
        value = _call(spec, job)
    except BaseException as exc:  # noqa: BLE001 - a handler must never take the worker down
        duration_ms = int((time.monotonic() - started) * 1000)
        return outcome_of_error(spec, job, exc, duration_ms)
    finally:
        current_trace_id.reset(trace_token)
        current_job_id.reset(job_token)
        if inline or getattr(_thread, "opened", False):
            _reset_connections(keep=callers)
            _thread.ended = time.monotonic()
    return outcome_of_return(job, value, int((time.monotonic() - started) * 1000))


def _execute_in_transaction(
    spec: HandlerSpec, job: JobContext, started: float, using: str
) -> Completion:
    """Handler writes and the completion commit together: exactly-once database effects.

    If the lease was lost meanwhile, the finalize matches no row and the whole transaction,
    the handler's writes included, is rolled back.
    """
    with transaction.atomic(using=using):
        value = spec.func(job)
        done = outcome_of_return(job, value, int((time.monotonic() - started) * 1000))
        if done.status not in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS):
            raise Fail(done.error or "handler result refused")
        if not finalize_in_transaction(done, using):
            raise LeaseLost(
                f"job {job.id} was taken over before its transaction committed; its writes "
                "were rolled back"
            )
    return done


def outcome_of_return(job: JobContext, value: Any, duration_ms: int) -> Completion:
    """The Completion of a handler that returned ``value``."""
    patch, bad_result = _result_patch(value, job)
    done = Completion(
        id=job.id,
        token=job.lease_text,
        attempt=job.attempts,
        status="",
        duration_ms=duration_ms,
        progress=job.progress_record(),
        fan_in=job.has_dependants,
    )
    if bad_result is not None:
        done.status = JobStatus.FAILED
        done.error = bad_result
        return done
    done.status = JobStatus.COMPLETED_WITH_ERRORS if job.item_errors else JobStatus.COMPLETED
    done.result = patch
    return done


def outcome_of_error(
    spec: HandlerSpec, job: JobContext, exc: BaseException, duration_ms: int
) -> Completion:
    """The Completion of a run that ended in ``exc`` (raised, or a timeout): retry or fail."""
    decision = retry.decide(spec, job.attempts, job.max_attempts, exc)
    error = _error_text(spec, exc)
    if decision.problem:
        error = f"{error.rstrip()}\n[django-pgjobs] {storable_text(decision.problem)}"
    return Completion(
        id=job.id,
        token=job.lease_text,
        attempt=job.attempts,
        status=decision.status,
        error=error,
        duration_ms=duration_ms,
        delay=decision.delay,
        run_at=decision.run_at,
        note=decision.note,
        progress=job.progress_record(),
        fan_in=job.has_dependants,
    )


def _error_text(spec: HandlerSpec, exc: BaseException) -> str:
    """The job's ``error``: the type's format_error, or the traceback if that fails."""
    try:
        return storable_text((spec.format_error or format_error)(exc))
    except Exception as bad:  # noqa: BLE001 - a formatter's bug must not lose the job
        return storable_text(
            f"{format_error(exc)}\n[django-pgjobs] format_error failed: "
            f"{bad.__class__.__name__}: {bad}"
        )


def _open_transactions() -> set[str]:
    """Aliases already inside a transaction before the handler ran: the caller's, not the
    handler's (testing.run_jobs() runs jobs on the test's thread, inside its TestCase)."""
    return {c.alias for c in connections.all(initialized_only=True) if c.in_atomic_block}


def _reset_connections(keep: set[str] | None = None) -> None:
    """Leave this thread's connections usable for the next job (a handler may break them)."""
    for conn in connections.all(initialized_only=True):
        if keep and conn.alias in keep:
            continue
        if conn.in_atomic_block:
            logger.warning(
                "a handler left a transaction open on %r; rolling it back",
                conn.alias,
                extra={"action": "job.leaked_transaction"},
            )
            try:
                conn.close()
            except Exception:  # noqa: BLE001,S110
                pass
            continue
        if conn.errors_occurred:
            conn.close_if_unusable_or_obsolete()
