"""The systems of bench/async_io.py's side-by-side drain: django-pgjobs and its peers, each
draining jobs that await 50 ms with C of them in flight, timed the same way.

Each system reuses its bench/systems.py class (environment, database, schema, count of
unfinished jobs) and adds an "asleep" job: bench/drivers/pgqueuer_aio.py, oban_aio.py,
bench/pgboss/aio.mjs, and bench/pgjobs_bench's ``asleep`` handler.  The drain is timed from
the first handler start (the shared-memory probe, bench/drivers/probe.py) to the first moment
the database shows no unfinished job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from . import envs, procs

BENCH = envs.BENCH_DIR
DRIVERS = BENCH / "drivers"
sys.path.insert(0, str(DRIVERS))
sys.path.insert(0, str(BENCH))
import probe  # noqa: E402
import systems  # noqa: E402

PEERS = ("pgqueuer", "pgboss", "oban")
DRAIN_TIMEOUT = 120.0  # seconds, per drain


class Ctx:
    """What a bench/systems.py System reads from the harness's context."""

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        self.server_url = server_url.rstrip("/") + "/"
        self.pg = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 5432,
            "user": parts.username or "postgres",
            "password": parts.password or "",
        }
        self.base_python = envs.find_python()
        self.pgjobs_args: list[str] = []

    def pg_url(self, db: str) -> str:
        return self.server_url + db


class AioSystem:
    """One system of the side-by-side drain: its database, its "asleep" jobs, its worker."""

    key = ""
    burst_exits = True

    def __init__(self, ctx: Ctx, db_prefix: str) -> None:
        self.ctx = ctx
        self.system = systems.SYSTEMS[self.key](ctx)
        self.system.db = f"{db_prefix}_{self.key}"
        self.system.url = ctx.pg_url(self.system.db)
        self.url = self.system.url

    def setup(self) -> str | None:
        """Build the environment, create the database and schema; a reason to skip, or None."""
        self.system.build()
        if self.system.skip_reason:
            return self.system.skip_reason
        _recreate_db(self.ctx, self.system.db)
        for argv, cwd in self.schema_cmds():
            subprocess.run(argv, cwd=cwd, env=self.env(), check=True, capture_output=True)  # noqa: S603
        return None

    def schema_cmds(self) -> list[tuple[list[str], str | None]]:
        return self.system.schema_cmds()

    def env(self) -> dict[str, str]:
        return self.system.env()

    def remaining_sql(self) -> str:
        return self.system.remaining_sql

    def truncate(self) -> list[str]:
        return self.system.truncate

    def prefill(self, n: int) -> None:
        """Enqueue n asleep jobs through the system's own bulk API (untimed)."""
        subprocess.run(self.prefill_argv(n), env=self.env(), check=True, timeout=300)  # noqa: S603

    def prefill_argv(self, n: int) -> list[str]:
        raise NotImplementedError

    def worker(self, concurrency: int) -> tuple[list[str], str | None]:
        raise NotImplementedError

    def version(self) -> dict[str, str]:
        return self.system.versions()

    def note(self, concurrency: int) -> str:
        raise NotImplementedError


class PgJobsAio(AioSystem):
    key = "pgjobs"

    def setup(self) -> str | None:
        _recreate_db(self.ctx, self.system.db)
        manage = [sys.executable, "-m", "django", "migrate", "-v", "0"]
        subprocess.run(manage, env=self.env(), check=True)  # noqa: S603
        return None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DATABASE_URL"] = self.url
        paths = [str(envs.REPO_DIR), str(BENCH / "pgjobs_bench"), str(DRIVERS)]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["DJANGO_SETTINGS_MODULE"] = "bench_settings"
        return env

    def prefill(self, n: int) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgjobs_job (type, config) SELECT 'asleep', "
                "jsonb_build_object('ms', 50, 'i', i) FROM generate_series(0, %s) i",
                [n - 1],
            )

    def worker(self, concurrency: int) -> tuple[list[str], str | None]:
        runjobs = [sys.executable, "-m", "django", "runjobs", "--burst", "-v", "0"]
        return [*runjobs, "--async-concurrency", str(concurrency)], None

    def version(self) -> dict[str, str]:
        head = subprocess.run(
            ["git", "-C", str(envs.REPO_DIR), "rev-parse", "--short", "HEAD"],  # noqa: S607
            capture_output=True,
            text=True,
        ).stdout.strip()
        return {"git": head, "python": sys.version.split()[0]}

    def note(self, concurrency: int) -> str:
        return f"runjobs --burst --async-concurrency {concurrency}"


class PgQueuerAio(AioSystem):
    key = "pgqueuer"

    def prefill_argv(self, n: int) -> list[str]:
        return [self.system.python, str(DRIVERS / "pgqueuer_aio.py"), "prefill", str(n)]

    def worker(self, concurrency: int) -> tuple[list[str], str | None]:
        argv = [self.system.python, str(DRIVERS / "pgqueuer_aio.py"), "worker", str(concurrency)]
        return argv, str(DRIVERS)

    def note(self, concurrency: int) -> str:
        return (
            f"pgqueuer.run(mode=drain, max_concurrent_tasks={concurrency}), entrypoint "
            f"concurrency_limit={concurrency}, batch_size {_pgqueuer_batch(concurrency)}"
        )


def _pgqueuer_batch(concurrency: int) -> int:
    return min(int(os.environ.get("BENCH_PGQUEUER_BATCH", 0)) or concurrency // 2, concurrency // 2)


class PgBossAio(AioSystem):
    key = "pgboss"
    burst_exits = False  # no burst mode: stopped once the drain is complete

    def schema_cmds(self) -> list[tuple[list[str], str | None]]:
        return [*self.system.schema_cmds(), (self._node("schema"), None)]

    def remaining_sql(self) -> str:
        return "SELECT count(*) FROM pgboss.job WHERE name = 'asleep' AND state < 'completed'"

    def truncate(self) -> list[str]:
        return ["pgboss.job"]

    def _node(self, *args: str) -> list[str]:
        return [self.system.node, str(BENCH / "pgboss" / "aio.mjs"), *args]

    def prefill_argv(self, n: int) -> list[str]:
        return self._node("prefill", str(n))

    def worker(self, concurrency: int) -> tuple[list[str], str | None]:
        return self._node("worker", str(concurrency)), None

    def note(self, concurrency: int) -> str:
        batch = min(concurrency, int(os.environ.get("BENCH_PGBOSS_BATCH", 25)))
        return (
            f"boss.work(batchSize {batch}, localConcurrency {max(1, round(concurrency / batch))}, "
            "burstWhenBatchFull), the batch awaited at once; stopped with SIGTERM"
        )


class ObanAio(AioSystem):
    key = "oban"
    burst_exits = False

    def prefill_argv(self, n: int) -> list[str]:
        return [self.system.python, str(DRIVERS / "oban_aio.py"), "prefill", str(n)]

    def worker(self, concurrency: int) -> tuple[list[str], str | None]:
        argv = self.system.worker_argv(False)[0]
        argv[argv.index("--queues") + 1] = f"default:{concurrency}"
        return argv, str(DRIVERS)

    def note(self, concurrency: int) -> str:
        return (
            f"oban start --queues default:{concurrency} (its CLI, pool of 10); SIGTERM at the end"
        )


AIO_SYSTEMS: dict[str, type[AioSystem]] = {
    cls.key: cls for cls in (PgJobsAio, PgQueuerAio, PgBossAio, ObanAio)
}


def _recreate_db(ctx: Ctx, db: str) -> None:
    with psycopg.connect(ctx.pg_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")


def drop_db(ctx: Ctx, db: str) -> None:
    with psycopg.connect(ctx.pg_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _reset(system: AioSystem, n: int) -> None:
    """Empty the system's tables, enqueue n asleep jobs, VACUUM ANALYZE (untimed)."""
    with psycopg.connect(system.url, autocommit=True) as conn:
        for table in system.truncate():
            conn.execute(f"TRUNCATE {table}")
    system.prefill(n)
    with psycopg.connect(system.url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        (left,) = conn.execute(system.remaining_sql()).fetchone()
    if left != n:
        raise RuntimeError(f"{system.key}: {left} jobs pending after a prefill of {n}")


def drain(system: AioSystem, n: int, concurrency: int, log: Path) -> dict:
    """One timed drain of n jobs by one worker: jobs/s, peak RSS, 1-minute load average."""
    _reset(system, n)
    fd, probe_path = tempfile.mkstemp(prefix="pgjobs_aio_probe_", dir="/dev/shm")
    os.close(fd)
    probe.create(probe_path)
    env = dict(system.env(), BENCH_PROBE_FILE=probe_path, BENCH_AIO_MS="50")
    argv, cwd = system.worker(concurrency)
    load = os.getloadavg()[0]
    proc = procs.Proc(argv, env=env, cwd=cwd, log_path=log, name=system.key)
    reader = probe.Reader(probe_path)
    try:
        end_ns = _wait_drained(system, proc, reader, n)
        first = reader.first_ns()
        rate = n / ((end_ns - first) / 1e9)
    finally:
        proc.stop()
        reader.close()
        os.unlink(probe_path)
    return {"rate": rate, "rss_kb": proc.maxrss_kb, "load1": round(load, 2)}


def _wait_drained(system: AioSystem, proc: procs.Proc, reader: probe.Reader, n: int) -> int:
    """Monotonic ns at which the database first shows no unfinished job (bounded)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    with psycopg.connect(system.url, autocommit=True) as conn:
        while reader.total() < n:
            proc.sample_memory()
            if proc.poll() is not None and reader.total() < n:
                raise RuntimeError(
                    f"{system.key} exited after {reader.total()} jobs\n{proc.tail()}"
                )
            _check_deadline(deadline, system, reader)
            time.sleep(0.005)
        while conn.execute(system.remaining_sql()).fetchone()[0]:
            _check_deadline(deadline, system, reader)
            time.sleep(0.001)
        return time.monotonic_ns()


def _check_deadline(deadline: float, system: AioSystem, reader: probe.Reader) -> None:
    if time.monotonic() > deadline:
        raise RuntimeError(f"{system.key}: drain not done in {DRAIN_TIMEOUT}s ({reader.total()})")
