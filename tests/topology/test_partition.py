"""A worker cut from its database by a silent partition (frames dropped, no reset) mid-job,
for 90 s: it notices within the bound its connection settings set, its handler is told the
lease is lost, another worker rescues the job after the lease, the server keeps no session of
the cut-off worker, and once the link heals the worker goes on by itself within seconds."""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime

import pytest

from tests.acceptance.conftest import assert_backs_off, db_errors
from tests.acceptance.invariants import Invariants
from tests.conftest import eventually

from .netns import Cluster, HostWorker, worker_hosts

pytestmark = pytest.mark.topology

LEASE = 10.0  # netfail_settings: the lease, and a dead link noticed within 4 s (2 + 1 x 2)
CUT_SECONDS = 90.0  # many backoff cycles (each at most 5 s) and nine leases
SETTINGS = "tests.topology.netfail_settings"
FLAGS = ("--concurrency", "2", "--reap-interval", "1", "--poll-interval", "0.5", "-v", "1")


def log_times(output: str, pattern: str) -> list[float]:
    """Wall-clock times of the worker's log lines matching ``pattern``."""
    return [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for m in re.finditer(
            rf"^(\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}}) .*{pattern}", output, re.MULTILINE
        )
    ]


def test_a_silent_partition_mid_job(request):
    with worker_hosts(2) as (a_host, b_host):
        cluster = Cluster([a_host, b_host]).start()
        request.addfinalizer(cluster.close)
        q = cluster.query
        inv = Invariants.begin(q)
        job = q(
            "INSERT INTO pgjobs_job (type, config) VALUES ('test.behave', "
            '\'{"do": "until_lease_lost", "seconds": 60}\') RETURNING id'
        )[0][0]
        inv.track(job)
        a = HostWorker(
            a_host,
            cluster.url_from(a_host),
            "--queues",
            "default,only-a",
            *FLAGS,
            settings=SETTINGS,
        )
        request.addfinalizer(a.close)
        eventually(
            lambda: q("SELECT 1 FROM testapp_execution WHERE job_id = %s", [job]),
            timeout=60,
            message="worker A started the job",
        )
        b = HostWorker(
            b_host, cluster.url_from(b_host), "--queues", "default", *FLAGS, settings=SETTINGS
        )
        request.addfinalizer(b.close)
        eventually(
            lambda: "started: queues=default" in b.output(), timeout=60, message="worker B up"
        )

        cut_at = time.time()
        a_host.cut()
        try:
            # A notices within the bound: a round trip at most every 0.5 s, failing within 4 s.
            eventually(lambda: db_errors(a.output()), timeout=20, message="A noticed the cut")
            detected = db_errors(a.output())[0].at - cut_at
            assert detected <= 0.5 + 4 + 1.5, detected
            # The server drops every session of A (its keepalives, set per session).
            eventually(
                lambda: (
                    not q(
                        "SELECT pid FROM pg_stat_activity WHERE client_addr = %s::inet",
                        [a_host.ns_ip],
                    )
                ),
                timeout=20,
                message="no session of A left on the server",
            )
            orphans_gone = time.time() - cut_at
            # A's handler is told by A's own clock, within the lease's length of the cut.
            said = eventually(
                lambda: re.search(rf"handler: job {job} lease_lost=True at ([0-9.]+)", a.output()),
                timeout=LEASE + 5,
                interval=0.1,
                message="A's handler saw lease_lost",
            )
            told = float(said.group(1)) - cut_at
            assert LEASE / 2 <= told <= LEASE + 0.5, told
            # B reaps the job once the lease expired on the server, and completes attempt 2.
            eventually(
                lambda: (
                    q("SELECT status, attempts FROM pgjobs_job WHERE id = %s", [job])
                    == [("COMPLETED", 2)]
                ),
                timeout=LEASE + 20,
                message="B rescued the job",
            )
            rescued = q(
                "SELECT extract(epoch FROM finished_at)::float8 FROM pgjobs_job WHERE id = %s",
                [job],
            )[0][0]
            # time under test: the partition lasts CUT_SECONDS
            time.sleep(max(0.0, cut_at + CUT_SECONDS - time.time()))
            assert a.proc.poll() is None, "A exited during the partition:\n" + a.output()
        finally:
            a_host.heal()
        healed_at = time.time()
        later = q(
            "INSERT INTO pgjobs_job (type, queue, config) VALUES ('test.behave', "
            "'only-a', '{\"do\": \"ok\"}') RETURNING id"
        )[0][0]
        inv.track(later)
        eventually(
            lambda: q("SELECT 1 FROM testapp_execution WHERE job_id = %s", [later]),
            timeout=20,
            message="A claimed again after the heal",
        )
        claimed_again = (
            q(
                "SELECT extract(epoch FROM started_at)::float8 FROM testapp_execution "
                "WHERE job_id = %s",
                [later],
            )[0][0]
            - healed_at
        )
        back = [t - healed_at for t in log_times(a.output(), "database reachable again")]
        assert back and 0 <= back[-1] <= 5 + 3 + 1, back  # a 5 s backoff, a 3 s connect
        assert claimed_again <= 10, claimed_again

        out = a.output()
        errors = db_errors(out)
        assert_backs_off(errors)
        assert len(errors) < CUT_SECONDS / 3, len(errors)  # ~ one per backoff + connect
        assert re.search(rf"job\.lease_lost test\.behave#{job}: its lease was not renewed", out)
        assert re.search(rf"lease_lost test\.behave#{job}: outcome COMPLETED discarded", out)
        # The stale run changed nothing: the job is as B left it.
        assert q(
            "SELECT status, attempts, result, extract(epoch FROM finished_at)::float8 "
            "FROM pgjobs_job WHERE id = %s",
            [job],
        ) == [("COMPLETED", 2, {"did": "until_lease_lost", "attempt": 2}, rescued)]
        for w in (a, b):
            w.signal(signal.SIGTERM)
        for w in (a, b):
            assert w.wait(timeout=30) == 0, w.output()[-3000:]
        eventually(
            lambda: not q("SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'pgjobs:%%'"),
            timeout=10,
            message="no session left",
        )
        inv.check(drained=True, min_lease=LEASE)
        print(
            f"\npartition: A noticed {detected:.1f}s after the cut, its handler was told "
            f"{told:.1f}s after, its sessions were gone from the server {orphans_gone:.1f}s "
            f"after; after the heal A reconnected in {back[-1]:.1f}s and claimed again in "
            f"{claimed_again:.1f}s"
        )
