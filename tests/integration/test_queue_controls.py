"""Pause and cluster-wide concurrency limits, enforced by the claim."""

import pytest

from django_pgjobs import enqueue_many, queries
from django_pgjobs.models import Queue
from tests.conftest import sql

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ["test.noop", "test.behave"]


def claim(limit=50, queues=None):
    return queries.claim(worker_id="w", types=TYPES, queues=queues, limit=limit, lease_seconds=30)


def test_paused_queue_is_not_claimed_and_resumes():
    enqueue_many("test.noop", [{}] * 3, queue="emails")
    enqueue_many("test.noop", [{}] * 2, queue="default")
    Queue.objects.create(name="emails", paused=True)
    assert {r.queue for r in claim()} == {"default"}
    assert claim() == []
    Queue.objects.filter(name="emails").update(paused=False)
    assert len(claim()) == 3


def test_limited_queue_is_only_claimed_through_its_cap():
    enqueue_many("test.noop", [{}] * 10, queue="emails")
    Queue.objects.create(name="emails", concurrency_limit=2)
    assert claim() == []  # the fast path leaves capped queues alone
    first = queries.claim_limited(
        queue="emails", worker_id="a", types=TYPES, limit=5, lease_seconds=30
    )
    assert len(first) == 2
    assert (
        queries.claim_limited(queue="emails", worker_id="b", types=TYPES, limit=5, lease_seconds=30)
        == []
    )
    sql(
        "UPDATE pgjobs_job SET status='COMPLETED', lease_token=NULL, lease_expires_at=NULL "
        "WHERE id=%s",
        [first[0].id],
    )
    assert (
        len(
            queries.claim_limited(
                queue="emails", worker_id="b", types=TYPES, limit=5, lease_seconds=30
            )
        )
        == 1
    )


def test_paused_limited_queue_is_not_claimed():
    enqueue_many("test.noop", [{}] * 3, queue="emails")
    Queue.objects.create(name="emails", concurrency_limit=2, paused=True)
    assert (
        queries.claim_limited(queue="emails", worker_id="a", types=TYPES, limit=5, lease_seconds=30)
        == []
    )
