"""The last two members of a group finalized at the same instant on two connections: under READ
COMMITTED each may see the other RUNNING in its snapshot, so a callback decided by counting
siblings is lost. Decided from the locked child's counter, it becomes PENDING exactly once."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from django_pgjobs import chord, queries
from django_pgjobs.models import Job
from django_pgjobs.queries import Completion
from tests.acceptance.invariants import workflow_invariants

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 40


def test_two_last_members_finalized_at_once_release_the_callback_once():
    for _ in range(ROUNDS):
        run = chord([("test.echo", {}), ("test.echo", {})], ("test.echo", {})).enqueue()
        rows = queries.claim(
            worker_id="w", types=["test.echo"], queues=None, limit=2, lease_seconds=30
        )
        assert len(rows) == 2
        start = threading.Barrier(2)
        written: list[set[int]] = []

        def finalize(
            row: queries.ClaimedRow,
            start: threading.Barrier = start,
            written: list[set[int]] = written,
        ) -> None:
            try:
                start.wait(timeout=10)
                done = Completion(row.id, row.lease_token, row.attempts, "COMPLETED")
                written.append(queries.finalize([done]))
            finally:
                connections.close_all()

        threads = [threading.Thread(target=finalize, args=(r,)) for r in rows]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(written) == 2 and set().union(*written) == {r.id for r in rows}
        callback = Job.objects.get(pk=run["callback"][0])
        assert (callback.status, callback.deps_open) == ("PENDING", 0)
        queries.cancel([callback.pk])  # the next round's claim takes members only
    assert not workflow_invariants()
