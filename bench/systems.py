"""The systems under test, as the orchestrator sees them.

Each system says how to build its environment, create its schema, run its producer
("client") commands and start its workers, and which SQL tells the orchestrator that a
drain is complete, what to truncate between runs and how to write N finished rows.
Everything that runs *inside* a system's environment lives in bench/drivers (and the two
Django projects, bench/pgjobs_bench and bench/tasksdb_bench, and bench/pgboss).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from benchlib import envs

BENCH = envs.BENCH_DIR
DRIVERS = BENCH / "drivers"

ALL_METRICS = (
    "enqueue_single",
    "enqueue_bulk",
    "drain_w1_nostats",
    "drain_w1",
    "drain_w2",
    "drain_w1_burststats",
    "pickup",
    "drain_w1_finished",
    "drain_w1_alongside",
    "soak",
)


class System:
    key = ""
    label = ""
    venv: str | None = None  # name under bench/.venvs (None: the core venv)
    metrics: tuple[str, ...] = ALL_METRICS
    truncate: list[str] = []  # tables emptied between runs
    vacuum: list[str] = []  # tables VACUUM ANALYZEd before each drain (autovacuum may be off)
    remaining_sql = ""  # -> count of jobs not finished yet (polled at the end of each timed
    # drain until 0: keep it cheap with many finished rows, or it lengthens drain_w1_finished)
    pickup_gap = (0.02, 0.05)  # seconds between pickup samples (spans the poll interval if polling)
    burst_exits = True  # its burst-mode worker exits by itself once the queue is empty

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.db = f"bench_{self.key}"
        self.url = ctx.pg_url(self.db)
        self.skip_reason: str | None = None

    # --- environment -----------------------------------------------------------------------
    def build(self) -> None:
        self.python = (
            str(envs.ensure_venv(self.venv, self.ctx.base_python)) if self.venv else sys.executable
        )

    def versions(self) -> dict[str, str]:
        return {}

    def env(self) -> dict[str, str]:
        e = dict(os.environ)
        e.pop("PYTHONPATH", None)
        e.update(
            {
                "DATABASE_URL": self.url,
                "PYTHONPATH": str(DRIVERS),
                "PYTHONUNBUFFERED": "1",
                "PGHOST": self.ctx.pg["host"],
                "PGPORT": str(self.ctx.pg["port"]),
                "PGUSER": self.ctx.pg["user"],
                "PGDATABASE": self.db,
            }
        )
        if self.ctx.pg.get("password"):
            e["PGPASSWORD"] = self.ctx.pg["password"]
        return e

    # --- commands --------------------------------------------------------------------------
    def schema_cmds(self) -> list[tuple[list[str], str | None]]:
        raise NotImplementedError

    def client_argv(self, *args: str) -> tuple[list[str], str | None]:
        raise NotImplementedError

    def worker_argv(self, burst: bool) -> tuple[list[str], str | None]:
        raise NotImplementedError

    def finished_sql(self, n: int) -> str:
        raise NotImplementedError

    def settings_note(self) -> str:
        return ""


# --- raw psycopg ------------------------------------------------------------------------------


class RawLimit(System):
    key = "raw_limit"
    label = "raw psycopg (limit)"
    truncate = ["raw_jobs", "raw_plain"]
    vacuum = ["raw_jobs"]
    remaining_sql = "SELECT count(*) FROM raw_jobs WHERE status IN ('pending', 'running')"
    batch = 100
    mode = "limit"
    metrics = ALL_METRICS + ("enqueue_single_plain",)

    def schema_cmds(self):
        return [([self.python, str(DRIVERS / "raw.py"), "schema"], None)]

    def client_argv(self, *args):
        return [self.python, str(DRIVERS / "raw.py"), *args], None

    def worker_argv(self, burst):
        argv = [
            self.python,
            str(DRIVERS / "raw.py"),
            "worker",
            "--mode",
            self.mode,
            "--batch",
            str(self.batch),
        ]
        return argv + (["--burst"] if burst else []), None

    def finished_sql(self, n):
        return (
            "INSERT INTO raw_jobs (queue, payload, status, attempts, created_at, started_at, "
            "finished_at) SELECT 'default', jsonb_build_object('i', g), 'done', 1, now(), now(), "
            f"now() FROM generate_series(1, {int(n)}) g"
        )

    def versions(self):
        return (
            envs.venv_versions("core", ["psycopg", "psycopg-binary"]) if self.venv is None else {}
        )

    def settings_note(self):
        return (
            f"claim batch {self.batch} (one UPDATE..FROM MATERIALIZED CTE, SKIP LOCKED), "
            "one UPDATE per batch to finish; single INSERT + statement NOTIFY trigger; COPY bulk"
        )


class RawPerJob(RawLimit):
    key = "raw_perjob"
    label = "raw psycopg (per-job finalize)"
    mode = "perjob"
    metrics = (
        "drain_w1_nostats",
        "drain_w1",
        "drain_w2",
        "drain_w1_burststats",
        "pickup",
        "drain_w1_finished",
    )

    def settings_note(self):
        return "claim batch 100 like raw_limit, then one UPDATE (one transaction) per finished job"


# --- django-pgjobs -----------------------------------------------------------------------------


class PgJobs(System):
    key = "pgjobs"
    label = "django-pgjobs"
    venv = "pgjobs"
    truncate = ["pgjobs_job", "pgjobs_worker"]
    vacuum = ["pgjobs_job"]
    # One count per partial index (claim: PENDING, lease: RUNNING). `status IN (...)` planned a
    # parallel sequential scan of the whole table: over 1M finished rows, ~80 ms of both cores
    # per poll, at the very end of the drain_w1_finished it times.
    remaining_sql = (
        "SELECT (SELECT count(*) FROM pgjobs_job WHERE status = 'PENDING') "
        "+ (SELECT count(*) FROM pgjobs_job WHERE status = 'RUNNING')"
    )
    project = BENCH / "pgjobs_bench"
    metrics = ALL_METRICS + ("enqueue_single_sql",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # another checkout, environment and database (bench/ab.py); defaults: this repository,
        # bench/.venvs/pgjobs, bench_pgjobs
        self.src = Path(
            getattr(ctx, "pgjobs_src", None) or os.environ.get("BENCH_PROJECT_DIR") or envs.REPO_DIR
        ).resolve()
        self.venv = getattr(ctx, "pgjobs_venv", None) or "pgjobs"
        self.db = getattr(ctx, "pgjobs_db", None) or self.db
        self.url = ctx.pg_url(self.db)

    def build(self):
        if not (self.src / "django_pgjobs" / "__init__.py").exists():
            self.skip_reason = f"django_pgjobs/ is not in {self.src}"
            return
        self.python = str(
            envs.ensure_venv(
                self.venv, self.ctx.base_python, req_name="pgjobs", project_dir=self.src
            )
        )

    def versions(self):
        import subprocess

        v = envs.venv_versions(self.venv, ["django-pgjobs", "Django", "psycopg", "psycopg-binary"])
        src = self.src
        if src != envs.REPO_DIR.resolve():
            v["src"] = str(src)
        try:
            head = subprocess.run(
                ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            dirty = subprocess.run(
                [
                    "git",
                    "-C",
                    str(src),
                    "status",
                    "--porcelain",
                    "--",
                    "django_pgjobs",
                    "pyproject.toml",
                ],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            pkg = subprocess.run(
                [
                    "git",
                    "-C",
                    str(src),
                    "log",
                    "-1",
                    "--format=%h",
                    "--",
                    "django_pgjobs",
                    "pyproject.toml",
                ],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            if head:
                v["git"] = (
                    head
                    + (f" (django_pgjobs last changed in {pkg})" if pkg and pkg != head else "")
                    + (" + uncommitted changes" if dirty else "")
                )
        except (OSError, subprocess.SubprocessError):
            pass
        return v

    def schema_cmds(self):
        return [([self.python, str(self.project / "manage.py"), "migrate", "-v0"], None)]

    def client_argv(self, *args):
        return [self.python, str(DRIVERS / "pgjobs_client.py"), *args], None

    def worker_argv(self, burst):
        argv = [self.python, str(self.project / "manage.py"), "runjobs", "--queues", "default"]
        argv += self.ctx.pgjobs_args
        return argv + (["--burst"] if burst else []), None

    def finished_sql(self, n):
        return (
            "INSERT INTO pgjobs_job (type, queue, priority, status, config, result, attempts, "
            "max_attempts, run_after, started_at, finished_at, duration_ms, created_at, updated_at, "
            "history, cancel_requested) "
            "SELECT 'noop', 'default', 0, 'COMPLETED', jsonb_build_object('i', g), '{}'::jsonb, 1, "
            "5, now(), now(), now(), 0, now(), now(), '[]'::jsonb, false "
            f"FROM generate_series(1, {int(n)}) g"
        )

    def settings_note(self):
        import subprocess

        defaults = ""
        try:
            out = subprocess.run(
                [
                    self.python,
                    "-c",
                    "from django_pgjobs.conf import DEFAULTS as D; "
                    "print(D.get('CONCURRENCY'), D.get('BATCH_SIZE'), D.get('POLL_INTERVAL'), "
                    "D.get('PREFETCH'))",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.split()
            defaults = (
                f" (package defaults: concurrency {out[0]}, batch size {out[1]}, "
                f"prefetch {out[3]}, poll interval {out[2]} s, verbosity 1)"
            )
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
        extra = " ".join(self.ctx.pgjobs_args)
        return (
            f"manage.py runjobs --queues default{(' ' + extra) if extra else ''} [--burst]"
            f"{'' if extra else defaults}; enqueue() in autocommit; enqueue_many()"
        )


# --- peers ------------------------------------------------------------------------------------


class Procrastinate(System):
    key = "procrastinate"
    label = "Procrastinate"
    venv = "procrastinate"
    truncate = ["procrastinate_jobs", "procrastinate_events", "procrastinate_workers"]
    vacuum = ["procrastinate_jobs", "procrastinate_events"]
    remaining_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"

    def procrastinate_bin(self):
        return str(Path(self.python).parent / "procrastinate")

    def versions(self):
        return envs.venv_versions(self.venv, ["procrastinate", "psycopg", "psycopg-pool"])

    def schema_cmds(self):
        return [
            ([self.procrastinate_bin(), "--app=procrastinate_app.app", "schema", "--apply"], None)
        ]

    def client_argv(self, *args):
        return [self.python, str(DRIVERS / "procrastinate_client.py"), *args], None

    def worker_argv(self, burst):
        return [
            self.procrastinate_bin(),
            "--app=procrastinate_app.app",
            "worker",
            "--queues",
            "default",
            "--one-shot" if burst else "--wait",
        ], None

    def finished_sql(self, n):
        # procrastinate_jobs rows in their final state (the status-events triggers fire too)
        return (
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts) "
            "SELECT 'default', 'noop', jsonb_build_object('i', g), 'succeeded', 1 "
            f"FROM generate_series(1, {int(n)}) g"
        )

    def settings_note(self):
        return (
            "procrastinate worker --queues default (defaults: concurrency 1, LISTEN/NOTIFY); "
            "--one-shot for drains; async task; task.defer() / batch_defer()"
        )


class TasksDB(System):
    key = "tasksdb"
    label = "django-tasks-db"
    venv = "tasksdb"
    metrics = (
        "enqueue_single",
        "drain_w1_nostats",
        "drain_w1",
        "drain_w2",
        "drain_w1_burststats",
        "pickup",
        "drain_w1_finished",
    )
    truncate = ["django_tasks_database_dbtaskresult"]
    vacuum = ["django_tasks_database_dbtaskresult"]
    remaining_sql = (
        "SELECT count(*) FROM django_tasks_database_dbtaskresult "
        "WHERE status IN ('READY', 'RUNNING')"
    )
    project = BENCH / "tasksdb_bench"
    pickup_gap = (0.02, 1.02)  # db_worker polls every 1 s (no LISTEN)

    def versions(self):
        return envs.venv_versions(self.venv, ["django-tasks-db", "Django", "psycopg"])

    def schema_cmds(self):
        return [([self.python, str(self.project / "manage.py"), "migrate", "-v0"], None)]

    def client_argv(self, *args):
        return [self.python, str(DRIVERS / "tasksdb_client.py"), *args], None

    def worker_argv(self, burst):
        argv = [
            self.python,
            str(self.project / "manage.py"),
            "db_worker",
            "--queue-name",
            "default",
        ]
        return argv + (["--batch"] if burst else []), None

    def finished_sql(self, n):
        return (
            "INSERT INTO django_tasks_database_dbtaskresult (id, status, args_kwargs, priority, "
            "task_path, queue_name, backend_name, run_after, enqueued_at, started_at, finished_at, "
            "return_value, exception_class_path, traceback, worker_ids) "
            "SELECT gen_random_uuid(), 'SUCCESSFUL', jsonb_build_object('args', '[]'::jsonb, "
            "'kwargs', jsonb_build_object('i', g)), 0, 'benchtasks.tasks.noop', 'default', "
            "'default', '9999-01-01 00:00:00+00', now(), now(), now(), 'null'::jsonb, '', '', "
            f"'[\"w\"]'::jsonb FROM generate_series(1, {int(n)}) g"
        )

    def settings_note(self):
        return (
            "manage.py db_worker (defaults: 1 task per transaction, 1 s polling interval, "
            "no LISTEN); --batch for drains; Task.enqueue(); no bulk API; CONN_MAX_AGE=600"
        )


class PgQueuer(System):
    key = "pgqueuer"
    label = "PgQueuer"
    venv = "pgqueuer"
    truncate = ["pgqueuer", "pgqueuer_log", "pgqueuer_statistics"]
    vacuum = ["pgqueuer", "pgqueuer_log"]
    remaining_sql = "SELECT count(*) FROM pgqueuer"  # finished jobs leave the table

    def versions(self):
        return envs.venv_versions(self.venv, ["pgqueuer", "asyncpg"])

    def schema_cmds(self):
        return [([str(Path(self.python).parent / "pgq"), "install"], None)]

    def client_argv(self, *args):
        return [self.python, str(DRIVERS / "pgqueuer_client.py"), *args], None

    def worker_argv(self, burst):
        return [self.python, str(DRIVERS / "pgqueuer_worker.py")] + (
            ["--drain"] if burst else []
        ), str(DRIVERS)

    def finished_sql(self, n):
        # PgQueuer deletes a finished job from its queue table and keeps its history in
        # pgqueuer_log: the "finished rows" are log rows (already aggregated into statistics)
        return (
            "INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated) "
            f"SELECT now(), g, 'successful', 0, 'noop', true FROM generate_series(1, {int(n)}) g"
        )

    def settings_note(self):
        return (
            "pgqueuer.run('pgqueuer_app:main') = `pgq run` defaults (batch 10, unlimited "
            "concurrency, LISTEN/NOTIFY), mode drain for drains; asyncpg driver; "
            "Queries.enqueue() scalar / lists"
        )


class PgBoss(System):
    key = "pgboss"
    label = "pg-boss (node)"
    truncate = ["pgboss.job_common"]
    vacuum = ["pgboss.job_common"]
    remaining_sql = "SELECT count(*) FROM pgboss.job WHERE name = 'noop' AND state < 'completed'"
    node_dir = BENCH / "pgboss"
    burst_exits = False  # no burst mode: stopped by the orchestrator

    def build(self):
        self.node = shutil.which("node")
        if not self.node:
            self.skip_reason = "node is not installed"
            return
        env_dir = envs.ensure_node_env("pgboss", self.node_dir / "package.json")
        if env_dir is None:
            self.skip_reason = "node/npm is not installed"
            return
        self.env_dir = env_dir
        self.python = sys.executable

    def env(self):
        e = super().env()
        e["DATABASE_URL"] = self.url.replace("postgresql://", "postgres://", 1)
        e["BENCH_NODE_ENV"] = str(self.env_dir)
        return e

    def versions(self):
        import json
        import subprocess

        try:
            pkg = json.loads((self.env_dir / "node_modules/pg-boss/package.json").read_text())
            node_v = subprocess.run(
                [self.node, "--version"], capture_output=True, text=True
            ).stdout.strip()
            return {
                "pg-boss": pkg["version"],
                "node": node_v,
                "pg-boss engines.node": pkg.get("engines", {}).get("node", ""),
            }
        except (OSError, ValueError, KeyError):
            return {}

    def schema_cmds(self):
        return [([self.node, str(self.node_dir / "client.mjs"), "schema"], None)]

    def client_argv(self, *args):
        return [self.node, str(self.node_dir / "client.mjs"), *args], None

    def worker_argv(self, burst):
        return [self.node, str(self.node_dir / "worker.mjs")], None  # no burst mode: stopped by us

    def finished_sql(self, n):
        return (
            "INSERT INTO pgboss.job (name, data, state, created_on, started_on, completed_on) "
            "SELECT 'noop', jsonb_build_object('i', g), 'completed', now(), now(), now() "
            f"FROM generate_series(1, {int(n)}) g"
        )

    def settings_note(self):
        return (
            "boss.work('noop', {batchSize: 100, burstWhenBatchFull: true}) with useListenNotify "
            "and a notify:true queue; boss.send() / boss.insert(); no burst mode (stopped "
            "with SIGTERM once the drain is complete)"
        )


class Oban(System):
    key = "oban"
    label = "Oban for Python"
    venv = "oban"
    burst_exits = False  # no burst mode: the orchestrator stops it once the drain is complete
    truncate = ["oban_jobs"]
    vacuum = ["oban_jobs"]
    # the fetch index leads with state: one index range per unfinished state
    remaining_sql = (
        "SELECT count(*) FROM oban_jobs "
        "WHERE state IN ('available', 'scheduled', 'executing', 'retryable')"
    )
    queue_limit = 10  # `oban start --queues default:10`, the docs' example

    def oban_bin(self):
        return str(Path(self.python).parent / "oban")

    def versions(self):
        return envs.venv_versions(self.venv, ["oban", "psycopg", "psycopg-pool"])

    def env(self):
        e = super().env()
        e["OBAN_DSN"] = self.url
        return e

    def schema_cmds(self):
        return [([self.oban_bin(), "install", "--dsn", self.url], None)]

    def client_argv(self, *args):
        return [self.python, str(DRIVERS / "oban_client.py"), *args], None

    def worker_argv(self, burst):
        return [
            self.oban_bin(),
            "start",
            "--dsn",
            self.url,
            "--queues",
            f"default:{self.queue_limit}",
            "--log-level",
            "WARNING",
        ], str(DRIVERS)

    def finished_sql(self, n):
        return (
            "INSERT INTO oban_jobs (state, queue, worker, args, attempt, attempted_at, "
            "completed_at, attempted_by) SELECT 'completed', 'default', 'oban_app.Noop', "
            "jsonb_build_object('i', g), 1, timezone('UTC', now()), timezone('UTC', now()), "
            f"ARRAY['bench'] FROM generate_series(1, {int(n)}) g"
        )

    def settings_note(self):
        return (
            f"`oban install`, then `oban start --queues default:{self.queue_limit}` (the "
            "docs' way: its CLI, default pool of 10, insert trigger + LISTEN/NOTIFY, no "
            "burst mode: stopped with SIGTERM once the drain is complete); Worker.enqueue() "
            "/ Oban.enqueue_many() from an unstarted Oban instance"
        )


# Run order: the targets' references first (raw limit, pg-boss, PgQueuer), so that a run whose
# time budget runs out on a slow machine skips the slowest peers, not the comparisons that matter.
SYSTEMS: dict[str, type[System]] = {
    cls.key: cls
    for cls in (PgJobs, RawLimit, PgBoss, PgQueuer, Oban, RawPerJob, Procrastinate, TasksDB)
}
ALIASES = {
    "django-pgjobs": "pgjobs",
    "raw": "raw_limit",
    "raw-limit": "raw_limit",
    "raw-perjob": "raw_perjob",
    "django-tasks-db": "tasksdb",
    "tasks-db": "tasksdb",
    "pg-boss": "pgboss",
    "oban-py": "oban",
}
