"""Failover mid-drain: the primary is stopped immediately and its synchronous standby
promoted. Workers on a multi-host connection string (host=a,b target_session_attrs=read-write)
reconnect to the new primary by themselves; none exits, every job whose enqueue committed
completes, none runs twice inside a valid lease, none is left RUNNING."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest

from tests.acceptance.conftest import db_errors
from tests.acceptance.invariants import Invariants, psycopg_query
from tests.conftest import eventually

from .netns import HostWorker
from .replication import primary_and_standby
from .test_partition import SETTINGS, log_times

pytestmark = pytest.mark.topology

LEASE = 5.0
JOBS = 240


class Enqueuer(threading.Thread):
    """Inserts a job every 50 ms through the multi-host string, across the failover; keeps
    the ids whose commit was acknowledged (an unacknowledged one may or may not exist)."""

    def __init__(self, conninfo: str):
        super().__init__(daemon=True)
        self.conninfo = conninfo
        self.acked: list[int] = []
        self.unknown = 0
        self.stop = threading.Event()

    def run(self) -> None:
        conn = None
        while not self.stop.wait(0.05):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=3)
                self.acked.append(
                    conn.execute(
                        "INSERT INTO pgjobs_job (type, config, max_attempts) VALUES ('test.behave', "
                        '\'{"do": "ok"}\', 3) RETURNING id'
                    ).fetchone()[0]
                )
            except psycopg.OperationalError:
                self.unknown += 1
                if conn is not None:
                    conn.close()
        if conn is not None:
            conn.close()


def test_failover_to_a_synchronous_standby_mid_drain(request):
    t0 = time.time()
    primary, standby = primary_and_standby()
    setup = time.time() - t0
    request.addfinalizer(standby.close)
    request.addfinalizer(primary.close)
    hosts, ports = f"{primary.host},{standby.host}", f"{primary.port},{standby.port}"
    conninfo = (
        f"host={hosts} port={ports} user=postgres dbname={primary.database} "
        "target_session_attrs=read-write"
    )
    before = psycopg.connect(primary.url, autocommit=True)
    ids = [
        r[0]
        for r in before.execute(
            "INSERT INTO pgjobs_job (type, config, max_attempts) SELECT 'test.behave', "
            '\'{"do": "sleep", "seconds": 0.02}\', 3 FROM generate_series(1, %s) RETURNING id',
            [JOBS],
        ).fetchall()
    ]
    env = {"PGJOBS_TEST_HOSTS": hosts, "PGJOBS_TEST_PORTS": ports}
    workers = []
    for _ in range(3):
        w = HostWorker(
            None,
            primary.url,
            "--concurrency",
            "4",
            "--lease",
            str(LEASE),
            "--reap-interval",
            "1",
            "--poll-interval",
            "0.5",
            "-v",
            "1",
            settings=SETTINGS,
            env=env,
        )
        request.addfinalizer(w.close)
        workers.append(w)
    enqueuer = Enqueuer(conninfo)
    enqueuer.start()
    eventually(
        lambda: (
            before.execute("SELECT count(*) FROM pgjobs_job WHERE status = 'COMPLETED'").fetchone()[
                0
            ]
            >= JOBS // 4
        ),
        timeout=60,
        message="the drain is under way",
    )
    before.close()

    killed_at = time.time()
    primary.stop("immediate")
    standby.promote()
    promoted_at = time.time()
    after = psycopg.connect(standby.url, autocommit=True)
    q = psycopg_query(after)
    inv = Invariants.begin(q).track(ids)  # the standby's own deadlock count from here on
    first = eventually(
        lambda: q(
            "SELECT min(extract(epoch FROM started_at))::float8 FROM "
            "testapp_execution WHERE started_at > to_timestamp(%s)",
            [promoted_at],
        )[0][0],
        timeout=30,
        message="a job started on the new primary",
    )
    time.sleep(2)  # time under test: 2 s of enqueues against the new primary
    enqueuer.stop.set()
    enqueuer.join(10)
    inv.track(enqueuer.acked)
    eventually(
        lambda: (
            q("SELECT count(*) FROM pgjobs_job WHERE status IN ('PENDING', 'RUNNING')")[0][0] == 0
        ),
        timeout=60,
        interval=0.2,
        message="every job done after the failover",
    )
    assert [w.proc.poll() for w in workers] == [None] * 3, "a worker exited"
    acked = set(enqueuer.acked)
    present = {
        r[0]
        for r in q(
            "SELECT id FROM pgjobs_job WHERE id = ANY(%s) AND status = 'COMPLETED'", [sorted(acked)]
        )
    }
    assert acked and acked == present, sorted(acked - present)[:20]  # nothing lost

    reconnects = []
    for w in workers:
        errors = [e for e in db_errors(w.output()) if e.at >= killed_at - 1]
        back = [t for t in log_times(w.output(), "database reachable again") if t >= killed_at]
        assert errors and back, w.output()[-3000:]
        reconnects.append(back[0] - killed_at)
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(timeout=30) == 0, w.output()[-3000:]
    inv.check(drained=True, min_lease=LEASE)
    retried = dict(
        q(
            "SELECT h->>'outcome', count(*) FROM pgjobs_job, "
            "jsonb_array_elements(history) h GROUP BY 1"
        )
    )
    after.close()
    assert max(reconnects) <= 10, reconnects
    print(
        f"\nfailover: promotion took {promoted_at - killed_at:.1f}s; the first job started on "
        f"the new primary {first - killed_at:.1f}s after the kill; workers were back "
        f"{', '.join(f'{r:.1f}' for r in sorted(reconnects))}s after it; {len(acked)} "
        f"enqueues acknowledged during the run, none lost ({enqueuer.unknown} refused); "
        f"earlier attempts of jobs that ran again: {retried}; took {time.time() - t0:.0f}s "
        f"(setup {setup:.0f}s, drain before the kill {killed_at - t0 - setup:.0f}s)"
    )
