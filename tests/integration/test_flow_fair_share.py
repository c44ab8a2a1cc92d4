"""Weighted fair share in the controlled claim (docs/flow-control.md): stride scheduling over
a queue's flow keys, passes in pgjobs_share. One connection, real PostgreSQL."""

from __future__ import annotations

import collections
import io

import pytest
from django.core.management import call_command

from django_pgjobs import enqueue_many, flow, queries
from django_pgjobs.models import Share
from tests.conftest import sql

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ["test.noop"]


@pytest.fixture
def queues(settings):
    def declare(**declared):
        settings.PGJOBS = {**settings.PGJOBS, "QUEUES": declared}

    return declare


def claim(limit, queue="crm"):
    return queries.claim_controlled(
        queue=queue,
        controls=flow.queues()[queue],
        worker_id="w",
        types=TYPES,
        limit=limit,
        lease_seconds=30,
    ).rows


def backlog(tenant, n, queue="crm"):
    enqueue_many("test.noop", [{"customer": tenant, "i": i} for i in range(n)], queue=queue)


def finish_all():
    sql(
        "UPDATE pgjobs_job SET status='COMPLETED', lease_token=NULL, lease_expires_at=NULL "
        "WHERE status='RUNNING'"
    )


def counts(rows):
    return collections.Counter(r.flow_key for r in rows)


def test_a_queue_with_weights_is_controlled(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "acme": 3}})
    assert flow.controlled_queues() == ("crm",)
    assert flow.queues()["crm"].fair_weights == {"acme": 3.0}
    assert flow.queues()["crm"].default_weight == 1.0


@pytest.mark.parametrize("limit", [1, 4, 8])
def test_starts_follow_the_weights_in_any_batch_size(queues, limit):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "acme": 3}})
    backlog("acme", 200)
    backlog("bob", 200)
    started = collections.Counter()
    while sum(started.values()) < 160:
        started += counts(claim(limit))
        finish_all()
    assert started == {"acme": 120, "bob": 40}


def test_three_tenants_share_by_weight_and_an_unnamed_key_gets_the_default(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "a": 2, "b": 3}})
    for tenant in ("a", "b", "c"):
        backlog(tenant, 100)
    started = collections.Counter()
    for _ in range(10):
        started += counts(claim(6))
        finish_all()
    assert started == {"a": 20, "b": 30, "c": 10}


def test_a_lone_tenant_takes_every_free_thread(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "acme": 3}})
    backlog("bob", 20)
    assert counts(claim(8)) == {"bob": 8}  # work-conserving: acme's weight holds nothing back


def test_a_tenant_back_from_idle_gets_no_burst(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1}})
    backlog("a", 5)
    claim(5)
    finish_all()  # a idles from here on; b runs alone for 100 starts
    backlog("b", 200)
    for _ in range(25):
        claim(4)
        finish_all()
    backlog("a", 100)  # a returns with a pass far behind b's: clamped to the virtual time
    started = collections.Counter()
    for _ in range(10):
        started += counts(claim(4))
        finish_all()
    assert started == {"a": 20, "b": 20}


def test_per_key_limit_still_binds_a_heavy_tenant(queues):
    queues(crm={"key": "config.customer", "per_key": 2, "fair": {"default": 1, "acme": 10}})
    backlog("acme", 20)
    backlog("bob", 20)
    assert counts(claim(8)) == {"acme": 2, "bob": 2}


def test_passes_are_stored_per_tenant_and_the_queue_has_its_virtual_time(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "acme": 2}})
    backlog("acme", 10)
    backlog("bob", 10)
    claim(3)  # acme at 0, 0.5; bob at 0: passes acme 1.0, bob 1.0
    passes = {s.tenant: s.pass_value for s in Share.objects.filter(queue="crm")}
    assert passes == {"acme": 1.0, "bob": 1.0, "": 0.5}


def test_keyless_jobs_are_one_tenant_of_the_default_weight(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "acme": 3}})
    backlog("acme", 50)
    backlog("old", 50)  # as if enqueued before the queue had its key path
    sql("UPDATE pgjobs_job SET flow_key = NULL WHERE flow_key = 'old'")
    started = collections.Counter()
    for _ in range(5):
        started += counts(claim(8))
        finish_all()
    assert started["acme"] >= 2 * started[None] > 0


def test_list_shows_the_weights(queues):
    queues(crm={"key": "config.customer", "fair": {"default": 1, "acme": 3}})
    backlog("acme", 2)
    out = io.StringIO()
    call_command("pgjobs_queue", "list", stdout=out)
    lines = {line.split()[0]: line.split() for line in out.getvalue().splitlines()}
    assert lines["QUEUE"][-2:] == ["FAIR", "WHY"]
    assert lines["crm"][-1] == "acme=3,default=1", lines["crm"]
