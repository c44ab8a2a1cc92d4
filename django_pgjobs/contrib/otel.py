"""OpenTelemetry spans: ``pip install 'django-pgjobs[otel]'``, then call :func:`install` once
(e.g. in ``AppConfig.ready``; the exporter setup stays yours).

- ``pgjobs enqueue <type>`` (PRODUCER), a child of the current span, when ``enqueue()`` writes a
  job (the ``job_enqueued`` signal);
- ``pgjobs run <type>`` (CONSUMER) around each run (``job_started`` -> ``job_finished``), current
  in the executor thread, so spans opened by the handler are its children.

The job row carries only the W3C trace id, so the two are linked without storing more: the
enqueue span's id is derived from (trace id, job id), and the run span names that span as its
parent and as a link. Both then sit in the request's trace. When the job has no W3C trace id
(no ``traceparent`` on the request, no explicit ``trace_id=``) the run span starts a new trace.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from .. import signals

_W3C = re.compile(r"^[0-9a-f]{32}$")
_next_span_id = threading.local()
_running: dict[int, Any] = {}
_running_lock = threading.Lock()
_thread = threading.local()  # the run span's context token in each executor thread


def enqueue_span_id(trace_id: str, job_id: int) -> int:
    digest = hashlib.sha256(f"pgjobs:{trace_id}:{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _job_trace(job: Any) -> str | None:
    t = (job.trace_id or "").lower()
    return t if _W3C.match(t) and t != "0" * 32 else None


class _JobIdGenerator:
    """Hands out the enqueue span's derived id once, then delegates to the SDK's generator."""

    def __init__(self, inner: Any):
        self.inner = inner

    def generate_span_id(self) -> int:
        forced = getattr(_next_span_id, "value", None)
        if forced is not None:
            _next_span_id.value = None
            return forced
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        return self.inner.generate_trace_id()

    def __getattr__(self, name: str) -> Any:  # e.g. is_trace_id_random() of newer SDKs
        return getattr(self.inner, name)


def _tracer() -> Any:
    tracer = trace.get_tracer("django_pgjobs")
    inner = getattr(tracer, "id_generator", None)  # SDK tracer; the API's no-op has none
    if inner is not None and not isinstance(inner, _JobIdGenerator):
        tracer.id_generator = _JobIdGenerator(inner)  # type: ignore[attr-defined]  # the SDK's
    return tracer


def _attributes(job: Any) -> dict[str, Any]:
    return {
        "messaging.system": "pgjobs",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "pgjobs.job.type": job.type,
        "pgjobs.trace_id": job.trace_id or "",
    }


def on_enqueued(sender: Any, job: Any, **kwargs: Any) -> None:
    tracer = _tracer()
    t = _job_trace(job)
    current = trace.get_current_span().get_span_context()
    if t is not None and current.is_valid and current.trace_id == int(t, 16):
        _next_span_id.value = enqueue_span_id(t, job.id)  # the run span will find it
    span = tracer.start_span(
        f"pgjobs enqueue {job.type}", kind=SpanKind.PRODUCER, attributes=_attributes(job)
    )
    _next_span_id.value = None
    span.end()


def on_started(sender: Any, job: Any, **kwargs: Any) -> None:
    t = _job_trace(job)
    links, ctx = [], None
    if t is not None:
        parent = SpanContext(
            trace_id=int(t, 16),
            span_id=enqueue_span_id(t, job.id),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        links = [Link(parent, {"pgjobs.link": "enqueue"})]
        ctx = trace.set_span_in_context(NonRecordingSpan(parent))
    span = _tracer().start_span(
        f"pgjobs run {job.type}",
        context=ctx,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={**_attributes(job), "pgjobs.attempt": job.attempts},
    )
    with _running_lock:
        _running[job.id] = span
    token = getattr(_thread, "token", None)
    if token is not None:
        otel_context.detach(token)
    _thread.token = otel_context.attach(trace.set_span_in_context(span))


def on_finished(
    sender: Any, job: Any, completion: Any, applied: bool = True, **kwargs: Any
) -> None:
    with _running_lock:
        span = _running.pop(job.id, None)
    if span is None:
        return
    span.set_attribute("pgjobs.outcome", completion.status if applied else "lease_lost")
    span.set_attribute("pgjobs.duration_ms", completion.duration_ms)
    if completion.error:
        span.set_status(Status(StatusCode.ERROR, completion.error.strip().splitlines()[-1][:200]))
    span.end()


def install() -> None:
    """Connect the span receivers (idempotent)."""
    uid = "pgjobs-otel"
    signals.job_enqueued.connect(on_enqueued, dispatch_uid=uid)
    signals.job_started.connect(on_started, dispatch_uid=uid)
    signals.job_finished.connect(on_finished, dispatch_uid=uid)


def uninstall() -> None:
    uid = "pgjobs-otel"
    for s in (signals.job_enqueued, signals.job_started, signals.job_finished):
        s.disconnect(dispatch_uid=uid)
