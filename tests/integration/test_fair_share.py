"""Fair share: one tenant's backlog does not starve another tenant's few jobs."""

import pytest

from django_pgjobs import enqueue_many, queries
from tests.conftest import sql

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ["test.noop"]


def claim(limit, fair, after=None):
    return queries.claim(
        worker_id="w",
        types=TYPES,
        queues=None,
        limit=limit,
        lease_seconds=30,
        fair=fair,
        after_tenant=after,
    )


def backlog():
    enqueue_many("test.noop", [{}] * 2000, tenant_id="big")
    enqueue_many("test.noop", [{}] * 10, tenant_id="small")
    enqueue_many("test.noop", [{}] * 3)  # no tenant


def test_without_fair_share_the_small_tenant_waits_behind_the_backlog():
    backlog()
    assert {r.tenant_id for r in claim(20, fair=False)} == {"big"}


def test_fair_share_interleaves_tenants_in_one_claim():
    backlog()
    rows = claim(20, fair=True)
    by_tenant = {}
    for r in rows:
        by_tenant[r.tenant_id] = by_tenant.get(r.tenant_id, 0) + 1
    # Round-robin by rank: ranks 1-3 take one job of each of the 3 lines, then the two tenant
    # lines alternate ("big" before "small" within a rank).
    assert by_tenant == {"big": 9, "small": 8, None: 3}


def test_fair_share_keeps_fifo_within_a_tenant_and_claims_exactly_the_limit():
    backlog()
    rows = claim(7, fair=True)
    assert len(rows) == 7
    big = sorted(r.id for r in rows if r.tenant_id == "big")
    first_big = sql(
        "SELECT id FROM pgjobs_job WHERE tenant_id='big' ORDER BY id LIMIT %s", [len(big)]
    )
    assert big == [r[0] for r in first_big]


def test_fair_share_rotates_over_many_tenants():
    """More tenants than one claim can serve: successive claims move on to the next ones."""
    for t in range(30):
        enqueue_many("test.noop", [{}] * 5, tenant_id=f"t{t:02d}")
    seen = []
    after = None
    for _ in range(3):
        rows = claim(10, fair=True, after=after)
        tenants = sorted({r.tenant_id for r in rows})
        seen.extend(tenants)
        after = max(tenants)
    assert len(seen) == 30 and len(set(seen)) == 30


def test_fair_share_respects_pause():
    from django_pgjobs.models import Queue

    enqueue_many("test.noop", [{}] * 3, tenant_id="a", queue="paused")
    enqueue_many("test.noop", [{}] * 2, tenant_id="b")
    Queue.objects.create(name="paused", paused=True)
    assert {r.tenant_id for r in claim(10, fair=True)} == {"b"}
