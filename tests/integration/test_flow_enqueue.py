"""Unique windows and debounce (docs/flow-control.md), one connection at a time: what each
enqueue writes and returns, and the bad input refused before any SQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_pgjobs import enqueue, enqueue_many
from django_pgjobs.exceptions import InvalidJobOption
from django_pgjobs.models import Job, UniqueWindow
from django_pgjobs.retention import prune_once
from tests.conftest import sql, sql_one

pytestmark = pytest.mark.django_db


def finish(job_id: int, status: str = "COMPLETED", ago: str = "0 seconds") -> None:
    sql(
        "UPDATE pgjobs_job SET status = %s, finished_at = now() - %s::interval WHERE id = %s",
        [status, ago, job_id],
    )


def pass_window(key: str) -> None:
    sql("UPDATE pgjobs_unique SET until = now() - interval '1 second' WHERE key = %s", [key])


# --- unique windows ------------------------------------------------------------------------------


def test_a_window_refuses_the_key_after_the_job_finished_until_it_passes():
    first = enqueue("test.echo", {"n": 1}, unique_key="r:42", unique_for=timedelta(hours=1))
    assert not first.deduplicated
    window = UniqueWindow.objects.get(key="r:42")
    assert window.job_id == first.id
    assert timedelta(minutes=59) < window.until - first.created_at <= timedelta(hours=1)
    finish(first.id)
    again = enqueue("test.echo", {"n": 2}, unique_key="r:42", unique_for=timedelta(hours=1))
    assert again.deduplicated and again.id == first.id
    pass_window("r:42")
    third = enqueue("test.echo", {"n": 3}, unique_key="r:42", unique_for=3600)
    assert not third.deduplicated and third.id != first.id
    assert UniqueWindow.objects.get(key="r:42").job_id == third.id
    assert Job.objects.filter(unique_key="r:42").count() == 2


def test_pruning_the_job_does_not_reopen_its_window():
    first = enqueue("test.echo", unique_key="nightly", unique_for=timedelta(days=30))
    finish(first.id, ago="8 days")
    counts = prune_once()
    assert counts["COMPLETED"] == 1 and not Job.objects.filter(pk=first.id).exists()
    again = enqueue("test.echo", unique_key="nightly", unique_for=timedelta(days=30))
    assert again.deduplicated and again.id == first.id
    assert again.holder_pruned and again.status is None
    assert Job.objects.filter(unique_key="nightly").count() == 0
    pass_window("nightly")
    assert prune_once()["unique_windows"] == 1  # a passed window's row goes
    assert not enqueue("test.echo", unique_key="nightly", unique_for=60).deduplicated


def test_a_window_that_passed_while_its_job_still_runs_keeps_the_key():
    first = enqueue("test.echo", unique_key="slow", unique_for=60)
    pass_window("slow")
    again = enqueue("test.echo", unique_key="slow", unique_for=60)
    assert again.deduplicated and again.id == first.id


def test_a_plain_unique_key_and_a_window_share_the_key_while_active():
    plain = enqueue("test.echo", unique_key="mixed")
    windowed = enqueue("test.echo", unique_key="mixed", unique_for=60)
    assert windowed.deduplicated and windowed.id == plain.id
    assert not UniqueWindow.objects.filter(key="mixed").exists()


def test_a_rolled_back_enqueue_leaves_the_window_open():
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("test.echo", unique_key="rb", unique_for=60)
        raise RuntimeError("rolled back")
    assert not UniqueWindow.objects.filter(key="rb").exists()
    assert not enqueue("test.echo", unique_key="rb", unique_for=60).deduplicated


# --- debounce --------------------------------------------------------------------------------------


def debounced(n: int, **options: object) -> Job:
    options = {"debounce": timedelta(seconds=30), "debounce_key": "doc:7", **options}
    return enqueue("test.echo", {"n": n}, **options)


def test_enqueues_of_a_key_merge_into_its_pending_job_with_the_last_config():
    first = debounced(1)
    assert not first.deduplicated and first.debounce_key == "doc:7"
    delay = first.run_after - first.created_at
    assert timedelta(seconds=29) < delay <= timedelta(seconds=30)
    second = debounced(2)
    assert second.deduplicated and second.id == first.id and second.config == {"n": 2}
    row = Job.objects.get(pk=first.id)
    assert row.config == {"n": 2} and row.run_after >= first.run_after


def test_the_max_wait_caps_how_far_merges_push_the_job_back():
    first = debounced(1, debounce_max_wait=timedelta(seconds=5))
    assert first.run_after - first.created_at <= timedelta(seconds=5)
    sql("UPDATE pgjobs_job SET created_at = now() - interval '4 seconds' WHERE id = %s", [first.id])
    again = debounced(2, debounce_max_wait=timedelta(seconds=5))
    assert again.id == first.id
    assert sql_one("SELECT run_after - created_at FROM pgjobs_job WHERE id = %s", [first.id]) == (
        timedelta(seconds=5)
    )


def test_a_claimed_job_takes_no_more_merges_and_the_next_enqueue_opens_a_new_one():
    first = debounced(1)
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        [first.id],
    )
    second = debounced(2)
    assert not second.deduplicated and second.id != first.id
    assert Job.objects.get(pk=first.id).config == {"n": 1}


def test_a_retried_job_beside_the_open_one_breaks_nothing():
    """Back to PENDING (retry, release, reap) appends history: out of the open-job index."""
    first = debounced(1)
    sql(
        "UPDATE pgjobs_job SET status = 'RUNNING', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        [first.id],
    )
    second = debounced(2)
    sql(
        "UPDATE pgjobs_job SET status = 'PENDING', lease_token = NULL, lease_expires_at = NULL, "
        """history = history || '[{"outcome": "released"}]' WHERE id = %s""",
        [first.id],
    )
    third = debounced(3)
    assert third.id == second.id and Job.objects.get(pk=second.id).config == {"n": 3}


def test_keys_are_per_type():
    a = enqueue("test.echo", {"n": 1}, debounce=30, debounce_key="k")
    b = enqueue("test.noop", {"n": 2}, debounce=30, debounce_key="k")
    assert a.id != b.id and not b.deduplicated


# --- bad input: refused before any SQL, the transaction still usable ----------------------------

BAD = [
    ({"unique_key": "k", "unique_for": 0}, "unique_for must be > 0"),
    ({"unique_key": "k", "unique_for": timedelta(seconds=-1)}, "unique_for must be > 0"),
    ({"unique_key": "k", "unique_for": float("nan")}, "unique_for must be > 0"),
    ({"unique_key": "k", "unique_for": True}, "unique_for must be a timedelta"),
    ({"unique_for": 60}, "unique_for needs a unique_key"),
    ({"debounce": 0, "debounce_key": "k"}, "debounce must be > 0"),
    ({"debounce": -5, "debounce_key": "k"}, "debounce must be > 0"),
    ({"debounce": 30}, "debounce needs a debounce_key"),
    ({"debounce_key": "k"}, "need debounce="),
    ({"debounce_max_wait": 5}, "debounce_max_wait needs"),
    ({"debounce": 30, "debounce_key": "k", "debounce_max_wait": 0}, "debounce_max_wait must"),
    ({"debounce": 30, "debounce_key": "k", "unique_key": "u"}, "combined with unique_key"),
    ({"debounce": 30, "debounce_key": "k", "run_after": 5}, "combined with run_after"),
    ({"debounce": 30, "debounce_key": ""}, "debounce_key must be 1-255"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_bad_flow_options_are_refused_before_any_sql(options, message, django_assert_num_queries):
    with transaction.atomic():
        with django_assert_num_queries(0), pytest.raises(InvalidJobOption, match=message):
            enqueue("test.echo", {"n": 1}, **options)
        assert enqueue("test.echo", {"n": 2}).id  # the transaction is still usable
    assert Job.objects.count() == 1 and UniqueWindow.objects.count() == 0


@pytest.mark.parametrize("name", ["debounce", "debounce_key", "unique_key", "unique_for"])
def test_enqueue_many_refuses_the_one_at_a_time_options(name):
    with transaction.atomic():
        with pytest.raises(InvalidJobOption, match=f"enqueue_many\\(\\) takes no {name}"):
            enqueue_many("test.echo", [{}, {}], **{name: 30})
        assert connection.needs_rollback is False
    assert Job.objects.count() == 0


@pytest.mark.parametrize("way_back", ["retry", "release", "reap"])
def test_the_real_ways_back_to_pending_never_collide_with_the_open_job(way_back):
    from django_pgjobs import queries
    from django_pgjobs.worker.maintenance import reaped_fate

    first = debounced(1)
    sql("UPDATE pgjobs_job SET run_after = now() WHERE id = %s", [first.id])
    [claimed] = queries.claim(
        worker_id="w", types=["test.echo"], queues=None, limit=1, lease_seconds=30
    )
    second = debounced(2)  # opens a new job: the first is RUNNING
    if way_back == "retry":
        written = queries.finalize(
            [queries.Completion(claimed.id, claimed.lease_token, 1, "PENDING", delay=0.0)]
        )
    elif way_back == "release":
        written = queries.release([(claimed.id, claimed.lease_token)], reason="shutdown")
    else:
        sql(
            "UPDATE pgjobs_job SET lease_expires_at = now() - interval '1 s' WHERE id = %s",
            [first.id],
        )
        written = {r[0] for r in queries.reap(reaped_fate)}
    assert written == {first.id}
    assert Job.objects.get(pk=first.id).status == "PENDING"
    third = debounced(3)
    assert third.id == second.id  # still the open job


@pytest.mark.django_db(transaction=True, databases=["default", "server_binding"])
def test_both_statements_work_under_server_side_binding():
    """Django's server-side binding sends one statement per query, parameters bound."""
    first = enqueue("test.echo", unique_key="sb", unique_for=60, using="server_binding")
    assert enqueue("test.echo", unique_key="sb", unique_for=60, using="server_binding").id == (
        first.id
    )
    one = enqueue("test.echo", {"n": 1}, debounce=30, debounce_key="sb", using="server_binding")
    two = enqueue("test.echo", {"n": 2}, debounce=30, debounce_key="sb", using="server_binding")
    assert two.deduplicated and two.id == one.id
