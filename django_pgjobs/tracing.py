"""The trace id: carried from the request (or the running job) to the jobs it enqueues, and set
on every log record emitted while a job runs."""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Callable
from typing import Any

current_trace_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pgjobs_trace_id", default=None
)
current_job_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "pgjobs_job_id", default=None
)

# W3C trace context: version-traceid-parentid-flags
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id_from_traceparent(header: str | None) -> str | None:
    if not header:
        return None
    m = _TRACEPARENT.match(header.strip().lower())
    if not m or m.group(1) == "0" * 32:
        return None
    return m.group(1)


class TraceIdFilter(logging.Filter):
    """Adds ``record.trace_id`` and ``record.job_id`` (or None) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = current_trace_id.get()
        if not hasattr(record, "job_id"):
            record.job_id = current_job_id.get()
        return True


class TraceMiddleware:
    """Reads the W3C ``traceparent`` header (or ``X-Request-ID``) so that jobs enqueued while
    handling the request carry its trace id."""

    def __init__(self, get_response: Callable[[Any], Any]):
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        trace_id = trace_id_from_traceparent(request.headers.get("traceparent")) or (
            request.headers.get("x-request-id") or None
        )
        if trace_id is not None:
            trace_id = trace_id[:255]
        token = current_trace_id.set(trace_id)
        try:
            return self.get_response(request)
        finally:
            current_trace_id.reset(token)
