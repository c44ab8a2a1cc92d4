"""Unique jobs: many concurrent enqueues of one key yield exactly one job (partial unique index)."""

import threading

import pytest
from django.db import connections

from django_pgjobs import enqueue
from django_pgjobs.models import Job
from tests.conftest import sql

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 16


def race(key: str, rounds: int = 1) -> tuple[list[tuple[int, bool]], list[BaseException]]:
    """THREADS threads, released together, each enqueue the same key ``rounds`` times."""
    barrier = threading.Barrier(THREADS)
    results: list[tuple[int, bool]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(rounds):
                job = enqueue("test.echo", {"thread": i}, unique_key=key)
                with lock:
                    results.append((job.id, job.deduplicated))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


def test_concurrent_enqueues_of_one_key_insert_exactly_one_job():
    results, errors = race("report:42", rounds=3)
    assert errors == []
    assert len(results) == THREADS * 3
    ids = {job_id for job_id, _ in results}
    assert len(ids) == 1, ids
    assert sum(1 for _, dedup in results if not dedup) == 1  # one inserted, the rest returned it
    assert Job.objects.filter(unique_key="report:42").count() == 1


def test_different_keys_do_not_block_each_other():
    results, errors = race("k")
    other = enqueue("test.echo", unique_key="other")
    assert errors == [] and not other.deduplicated
    assert Job.objects.filter(unique_key__in=["k", "other"]).count() == 2


@pytest.mark.parametrize("status", ["COMPLETED", "FAILED", "CANCELLED"])
def test_once_the_job_is_finished_the_key_is_free_again(status):
    first = enqueue("test.echo", unique_key="nightly")
    sql("UPDATE pgjobs_job SET status = %s, finished_at = now() WHERE id = %s", [status, first.id])
    results, errors = race("nightly")
    assert errors == []
    [(second_id, _)] = {(i, False) for i, _ in results}  # one new job for all the racers
    assert second_id != first.id
    assert Job.objects.filter(unique_key="nightly").count() == 2


def test_a_running_job_holds_its_key():
    first = enqueue("test.echo", unique_key="running")
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        [first.id],
    )
    again = enqueue("test.echo", unique_key="running")
    assert again.deduplicated and again.id == first.id
