"""Weighted fair share with real workers (docs/flow-control.md): 4 `runjobs` share a queue
3:1 between two tenants, cluster-wide, while both have a backlog; each job runs once."""

from __future__ import annotations

import signal

import pytest

from django_pgjobs import enqueue_many
from django_pgjobs.models import Queue
from tests.acceptance.fair_settings import FAIR_QUEUES
from tests.acceptance.invariants import Invariants
from tests.conftest import eventually, sql, sql_one

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = ("--settings", "tests.acceptance.fair_settings")
PER_TENANT = 400


@pytest.fixture(autouse=True)
def _declared(settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUES": FAIR_QUEUES}


def test_four_workers_start_the_tenants_jobs_three_to_one(start_worker):
    Queue.objects.create(name="shared", paused=True)
    ids = [
        *enqueue_many("test.noop", [{"k": "acme"}] * PER_TENANT, queue="shared"),
        *enqueue_many("test.noop", [{"k": "bob"}] * PER_TENANT, queue="shared"),
    ]
    inv = Invariants.begin().track(ids)
    workers = [
        start_worker(*SETTINGS, "--concurrency", "4", "--poll-interval", "0.05", "-v", "0")
        for _ in range(4)
    ]
    eventually(lambda: sql_one("SELECT count(*) FROM pgjobs_worker") == 4, timeout=60)
    Queue.objects.update(paused=False)
    eventually(
        lambda: sql_one("SELECT count(*) FROM pgjobs_job WHERE status <> 'COMPLETED'") == 0,
        timeout=120,
    )
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()[-3000:]
    inv.check(drained=True)
    # The starts (claim times, database clock; claims of the queue are serialised) up to
    # acme's last one: both tenants had a backlog all along.
    starts = [
        k
        for (k,) in sql(
            "SELECT flow_key FROM pgjobs_job WHERE queue = 'shared' ORDER BY started_at, id"
        )
    ]
    both = starts[: max(i for i, k in enumerate(starts) if k == "acme") + 1]
    acme, bob = both.count("acme"), both.count("bob")
    assert acme == PER_TENANT and bob > 0
    assert 2.7 <= acme / bob <= 3.3, (acme, bob)
