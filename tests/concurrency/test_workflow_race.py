"""The last two members of a group finalized at the same instant on two connections: under READ
COMMITTED each may see the other RUNNING in its snapshot, so a callback decided by counting
siblings is lost. Decided from the locked child's counter, it becomes PENDING exactly once."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from django_pgjobs import chord, enqueue, queries
from django_pgjobs.models import Job
from django_pgjobs.queries import Completion
from tests.acceptance.invariants import workflow_invariants
from tests.conftest import eventually, sql, sql_one

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


_WAITING_ON_US = (  # a lock another session waits for, held by this one
    "SELECT count(*) FROM pg_locks "
    "WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
)


def test_a_parent_gaining_a_dependant_while_its_plain_finalize_waits_still_resolves_it():
    """The plain finalize (chosen from the claim: no dependants then) waits on the row lock of
    the transaction that gives the running job a dependant; after that commit the fence
    re-reads the row, leaves the job, and the finalize with the fan-in resolves the edge."""
    parent = enqueue("test.noop", {}).id
    (row,) = queries.claim(
        worker_id="w", types=["test.noop"], queues=None, limit=1, lease_seconds=30
    )
    assert not row.has_dependants
    child = enqueue("test.echo", {}).id
    written: list[set[int]] = []

    def finalize() -> None:
        try:
            done = Completion(row.id, row.lease_token, row.attempts, "COMPLETED", fan_in=False)
            written.append(queries.finalize([done]))
        finally:
            connections.close_all()

    with transaction.atomic():  # what an edge insertion would do to an existing parent
        sql("UPDATE pgjobs_job SET status = 'WAITING', deps_open = 1 WHERE id = %s", [child])
        sql("INSERT INTO pgjobs_dependency (parent_id, child_id, mode) VALUES (%s, %s, 'success')",
            [parent, child])  # fmt: skip
        sql("UPDATE pgjobs_job SET has_dependants = true WHERE id = %s", [parent])
        thread = threading.Thread(target=finalize)
        thread.start()
        eventually(lambda: sql_one(_WAITING_ON_US), message="the finalize waits on the row")
    thread.join(timeout=30)
    assert written == [{parent}]
    assert Job.objects.get(pk=parent).status == "COMPLETED"
    child_row = Job.objects.get(pk=child)
    assert (child_row.status, child_row.deps_open) == ("PENDING", 0)
    assert not workflow_invariants()
