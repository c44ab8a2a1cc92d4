"""The [otel] extra: an enqueue span and a run span linked through the job's trace id."""

from __future__ import annotations

import pytest

from django_pgjobs import enqueue
from tests.support.observability import require_extra, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans():
    require_extra("opentelemetry.sdk.trace", "otel")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from django_pgjobs.contrib import otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER = None  # noqa: SLF001 - tests own the global provider
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # noqa: SLF001
    trace.set_tracer_provider(provider)
    otel.install()
    yield exporter, provider
    otel.uninstall()


def test_enqueue_and_run_spans_are_linked(spans):
    exporter, provider = spans
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request_span:
        trace_id = format(request_span.get_span_context().trace_id, "032x")
        job = enqueue("test.behave", {"do": "ok"}, trace_id=trace_id)
    run_worker()
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    enq, run = by_name["pgjobs enqueue test.behave"], by_name["pgjobs run test.behave"]
    assert enq.parent.span_id == request_span.get_span_context().span_id
    assert run.context.trace_id == enq.context.trace_id == int(trace_id, 16)
    assert run.parent.span_id == enq.context.span_id
    assert [link.context.span_id for link in run.links] == [enq.context.span_id]
    assert run.attributes["messaging.message.id"] == str(job.id)
    assert run.attributes["pgjobs.outcome"] == "COMPLETED"


def test_a_failed_run_has_an_error_status_and_no_trace_starts_a_new_one(spans):
    exporter, _ = spans
    enqueue("test.behave", {"do": "fail"})
    run_worker()
    run = next(s for s in exporter.get_finished_spans() if s.name.startswith("pgjobs run"))
    assert (
        run.status.status_code.name == "ERROR" and "given up on purpose" in run.status.description
    )
    assert run.parent is None and not run.links
