"""PgQueuer consumer factory for ``pgq run pgqueuer_app:main`` (bench/.venvs/pgqueuer).

As in PgQueuer's README quick start: an asyncpg connection wrapped in AsyncpgDriver,
a PgQueuer instance and an async entrypoint.  pgqueuer 1.6 wants the factory to be an
async context manager (its error message says so), so it is one.
"""

import os
from contextlib import asynccontextmanager

import asyncpg
import probe
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench_pgqueuer")


@asynccontextmanager
async def main():
    connection = await asyncpg.connect(URL)
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        probe.hit(job.payload or -1)

    try:
        yield pgq
    finally:
        await connection.close()
