"""Secrets in a job's config never reach a real worker's log, even at -v 2."""

from __future__ import annotations

import pytest

from django_pgjobs import enqueue
from django_pgjobs.models import Job

SECRETS = {
    "password": "hunter2-PW-4f1c",
    "api_key": "sk-live-AK-93b2",  # noqa: S105
    "nested": {"Authorization": "Bearer TOK-77e0"},
}


@pytest.mark.django_db(transaction=True)
def test_secrets_in_config_never_reach_the_worker_log(start_worker):
    ok = enqueue("test.echo", SECRETS)
    items = enqueue("test.behave", {"do": "items", "n": 3, **SECRETS})
    retried = enqueue("test.behave", {"do": "retry", "seconds": 60, **SECRETS})
    w = start_worker("--burst", "--concurrency", "2", "-v", "2")
    assert w.wait(timeout=60) == 0, w.output()
    output = w.output()
    assert f"test.echo#{ok.id}" in output and "job.completed" in output  # the log is verbose
    assert f"#{items.id}" in output and f"#{retried.id}" in output
    for secret in ("hunter2-PW-4f1c", "sk-live-AK-93b2", "TOK-77e0"):
        assert secret not in output, f"{secret} leaked into the worker's log"
    assert Job.objects.get(pk=ok.id).result["echo"] == SECRETS  # stored, just never logged
