"""trace_id from the request (W3C traceparent) -> the job row -> every log record of the run."""

from __future__ import annotations

import logging

import pytest
from django.http import JsonResponse
from django.urls import path

from django_pgjobs import enqueue, handler
from django_pgjobs.models import Job
from django_pgjobs.tracing import TraceIdFilter
from tests.support.observability import run_worker

pytestmark = pytest.mark.django_db(transaction=True)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
log = logging.getLogger("tests.observability.handler")


@handler("obs.log")
def logs_something(job):
    log.info("working on %s", job.id)


def enqueue_view(request):
    job = enqueue("obs.log", {})
    return JsonResponse({"id": job.id, "trace_id": job.trace_id})


urlpatterns = [path("enqueue/", enqueue_view)]


class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(TraceIdFilter())

    def emit(self, record):
        self.records.append(record)


@pytest.mark.urls(__name__)
def test_request_trace_id_reaches_the_job_and_its_logs(client):
    response = client.get("/enqueue/", headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})
    job_id = response.json()["id"]
    assert response.json()["trace_id"] == TRACE
    assert Job.objects.get(pk=job_id).trace_id == TRACE
    capture = Capture()
    log.addHandler(capture)
    log.setLevel(logging.INFO)
    try:
        run_worker()
    finally:
        log.removeHandler(capture)
    records = [r for r in capture.records if r.getMessage() == f"working on {job_id}"]
    assert len(records) == 1
    assert (records[0].trace_id, records[0].job_id) == (TRACE, job_id)


@pytest.mark.urls(__name__)
def test_without_header_there_is_no_trace_id_and_a_bad_header_is_ignored(client):
    assert client.get("/enqueue/").json()["trace_id"] is None
    assert client.get("/enqueue/", headers={"traceparent": "garbage"}).json()["trace_id"] is None


def test_searchable_in_the_admin(admin_client):
    job = enqueue("obs.log", {}, trace_id=TRACE)
    html = admin_client.get(f"/admin/django_pgjobs/job/?q={TRACE[:10]}").content.decode()
    assert f'value="{job.id}"' in html
