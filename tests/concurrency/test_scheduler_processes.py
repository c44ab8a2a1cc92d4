"""Four real runjobs processes run the scheduler at once: every tick fires exactly one job."""

import re
import signal
import subprocess
from datetime import timedelta

import pytest

from django_pgjobs.models import Job, ScheduleFire
from tests.conftest import eventually

pytestmark = pytest.mark.django_db(transaction=True)

TICKS = 8


def stop(worker) -> int:
    """SIGTERM and wait; a worker that does not stop dumps its threads' stacks into the failure."""
    worker.signal(signal.SIGTERM)
    try:
        return worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.signal(signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER) prints every thread
        worker.wait(timeout=10)
        pytest.fail(f"worker {worker.pid} ignored SIGTERM for 60 s:\n{worker.output()[-20000:]}")


def test_four_workers_fire_each_tick_exactly_once(start_worker):
    workers = [
        start_worker(
            "--settings",
            "tests.support.scheduler_settings",
            "--poll-interval",
            "0.2",
            "--concurrency",
            "1",
            "-v",
            "1",
            env={"PYTHONFAULTHANDLER": "1"},
        )
        for _ in range(4)
    ]
    eventually(
        lambda: ScheduleFire.objects.count() >= TICKS, timeout=90, message=f"{TICKS} ticks fired"
    )
    for w in workers:
        assert stop(w) == 0, w.output()

    fires = list(ScheduleFire.objects.filter(schedule="every-second").order_by("fire_time"))
    times = [f.fire_time for f in fires]
    # Every second from the first tick to the last fired, none twice, none missing.
    assert times == [times[0] + timedelta(seconds=i) for i in range(len(times))]
    jobs = Job.objects.filter(operated_by="schedule:every-second")
    assert jobs.count() == len(fires)
    assert sorted(f.job_id for f in fires) == sorted(jobs.values_list("id", flat=True))
    # The workers really raced: several of them won ticks, and the wins add up.
    wins = [len(re.findall(r"schedule\.fired every-second@", w.output())) for w in workers]
    assert sum(wins) == len(fires)
    assert sum(1 for n in wins if n) >= 2, wins
