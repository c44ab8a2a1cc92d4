"""Commands facing an unreachable database (issues 26.8, 30.11): after `runjobs --burst` gives
up, nothing it prints says it retries; `pgjobs_stats` reports it as `pgjobs_health` does."""

import json

import pytest

from django_pgjobs import JobStatus, enqueue
from tests.conftest import eventually, sql_one
from tests.support.commands import DOWN, manage

from .tcp_proxy import TcpProxy

VERDICT = "giving up"


def after_verdict(output: str) -> list[str]:
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if VERDICT in line)
    return lines[at + 1 :]


def assert_no_retry_after_verdict(output: str) -> None:
    assert VERDICT in output, output[-3000:]
    later = [line for line in after_verdict(output) if "retry" in line.lower()]
    assert not later, "after the verdict:\n" + "\n".join(later)


def test_burst_gives_up_on_a_database_down_from_the_start_and_says_nothing_more():
    done = manage("runjobs", "--burst", "--give-up-after", "2", url=DOWN, timeout=60)
    assert done.returncode == 4, done.stderr[-3000:]
    assert_no_retry_after_verdict(done.stderr)


@pytest.mark.django_db(transaction=True)
def test_burst_gives_up_on_a_database_lost_mid_run_and_says_nothing_more(start_worker):
    proxy = TcpProxy.to_test_database()
    try:
        job = enqueue("test.behave", {"do": "block", "seconds": 2})
        worker = start_worker(
            "--burst",
            "--give-up-after",
            "2",
            "--concurrency",
            "1",
            "--no-scheduler",
            "--no-prune",
            env={"DATABASE_URL": proxy.url()},
        )
        eventually(
            lambda: (
                sql_one("SELECT status FROM pgjobs_job WHERE id = %s", [job.id])
                == JobStatus.RUNNING
            ),
            timeout=30,
            message="the job running",
        )
        proxy.stop()
        assert worker.wait(timeout=60) == 4, worker.output()[-3000:]
    finally:
        proxy.stop()
    output = worker.output()
    assert_no_retry_after_verdict(output)
    assert "database error while stopping" in output, output[-3000:]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_stats_with_the_database_down_says_so_in_one_line(as_json):
    done = manage("pgjobs_stats", *(["--json"] if as_json else []), url=DOWN)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    if as_json:
        assert json.loads(done.stdout)["error"].startswith(
            "cannot reach database 'default': OperationalError"
        )
    else:
        assert done.stderr.startswith("ERROR: cannot reach database 'default': Operational")
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
