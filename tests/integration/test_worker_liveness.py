"""One definition of a live worker (sql/workers.py): a heartbeat within ALIVE_LEASES of the
worker's own lease, recorded on its row. Stats, the dashboard, pgjobs_health and the pruning of
worker rows all count it so."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_pgjobs import dashboard, health_checks, retention, stats
from django_pgjobs.db import database_now
from django_pgjobs.models import Worker
from django_pgjobs.sql import workers
from django_pgjobs.worker.leases import LeaseKeeper
from django_pgjobs.worker.options import WorkerOptions
from django_pgjobs.worker.slots import Slots

pytestmark = pytest.mark.django_db

LEASE = 30.0  # tests/settings.py: the global LEASE_SECONDS


def silent_worker(name: str, *, lease: float | None, silent_for: float) -> None:
    workers.upsert_worker(
        worker_id=name,
        hostname="h",
        pid=1,
        queues=["*"],
        concurrency=1,
        jobs_done=0,
        lease_seconds=lease,
    )
    Worker.objects.filter(worker_id=name).update(
        last_heartbeat=database_now() - timedelta(seconds=silent_for)
    )


def alive_everywhere() -> dict[str, bool]:
    """Each worker's liveness by stats and the dashboard, checked against pgjobs_health's count."""
    by_stats = {w["worker_id"]: w["alive"] for w in stats.workers()}
    assert {w["worker_id"]: w["alive"] for w in dashboard.build()["workers"]} == by_stats
    assert health_checks.collect()["live_workers"] == sum(by_stats.values())
    return by_stats


def test_the_rule_is_three_of_the_workers_own_leases():
    assert workers.ALIVE_LEASES == 3 and workers.FORGET_LEASES == 10


def test_a_worker_with_a_long_lease_stays_alive_past_the_global_window():
    # 400 s: past 3 (and 10) global leases of 30 s, within 3 of its own 1000 s lease.
    silent_worker("long", lease=1000.0, silent_for=400)
    assert alive_everywhere() == {"long": True}
    assert retention.prune_once()["workers"] == 0
    assert Worker.objects.filter(worker_id="long").exists()


def test_a_worker_with_a_short_lease_is_dead_after_its_own_window():
    # 15 s: well within the global window, past 3 (and 10) of its own 1 s lease.
    silent_worker("short", lease=1.0, silent_for=15)
    silent_worker("fresh", lease=1.0, silent_for=0)
    assert alive_everywhere() == {"short": False, "fresh": True}
    assert retention.prune_once()["workers"] == 1
    assert list(Worker.objects.values_list("worker_id", flat=True)) == ["fresh"]


def test_a_row_without_its_lease_counts_with_the_setting():
    silent_worker("recent", lease=None, silent_for=2 * LEASE)
    silent_worker("silent", lease=None, silent_for=4 * LEASE)
    silent_worker("gone", lease=None, silent_for=11 * LEASE)
    assert alive_everywhere() == {"recent": True, "silent": False, "gone": False}
    assert retention.prune_once()["workers"] == 1
    assert sorted(Worker.objects.values_list("worker_id", flat=True)) == ["recent", "silent"]


def test_the_heartbeat_records_the_workers_own_lease():
    keeper = LeaseKeeper(
        "w-lease",
        WorkerOptions(lease_seconds=7.5),
        Slots(),
        finished=lambda item, outcome: 0,
        jobs_done=lambda: 3,
    )
    keeper.renew()
    row = Worker.objects.get(worker_id="w-lease")
    assert (row.lease_seconds, row.jobs_done) == (7.5, 3)
