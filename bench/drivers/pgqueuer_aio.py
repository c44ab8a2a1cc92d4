"""PgQueuer side of bench/async_io.py: jobs that await BENCH_AIO_MS ms, C of them in flight.

    python pgqueuer_aio.py prefill N     # Queries.enqueue with lists, 5,000 jobs per insert
    python pgqueuer_aio.py worker C      # pgqueuer.run(mode=drain): exits once the queue is empty

The worker is the one ``pgq run`` starts (see pgqueuer_worker.py), its entrypoint declared
with ``concurrency_limit=C``, the run capped at ``max_concurrent_tasks=C`` and fetching
batches of C / 2 (``BENCH_PGQUEUER_BATCH``; PgQueuer refuses a batch over half the cap).
"""

import asyncio
import os
import sys
from contextlib import asynccontextmanager

import asyncpg
import pgqueuer
import probe
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain import types
from pgqueuer.queries import Queries

URL = os.environ["DATABASE_URL"]
SECONDS = int(os.environ.get("BENCH_AIO_MS", "50")) / 1000
BATCH = int(os.environ.get("BENCH_PGQUEUER_BATCH", "0"))  # 0: C / 2, the most the cap allows


async def prefill(n: int) -> None:
    connection = await asyncpg.connect(URL)
    queries = Queries(AsyncpgDriver(connection))
    for start in range(0, n, 5000):
        seqs = range(start, min(n, start + 5000))
        await queries.enqueue(
            ["asleep"] * len(seqs), [str(i).encode() for i in seqs], [0] * len(seqs)
        )
    await connection.close()


def factory(concurrency: int):
    @asynccontextmanager
    async def main():
        connection = await asyncpg.connect(URL)
        pgq = PgQueuer(AsyncpgDriver(connection))

        @pgq.entrypoint("asleep", concurrency_limit=concurrency)
        async def asleep(job) -> None:
            probe.hit(job.payload or -1)
            await asyncio.sleep(SECONDS)

        try:
            yield pgq
        finally:
            await connection.close()

    return main


if __name__ == "__main__":
    cmd, n = sys.argv[1], int(sys.argv[2])
    if cmd == "prefill":
        asyncio.run(prefill(n))
    else:
        mode = types.QueueExecutionMode.drain
        batch = min(BATCH or n // 2, n // 2)  # PgQueuer: max_concurrent_tasks >= 2 x batch_size
        run = pgqueuer.run(factory(n), mode=mode, batch_size=batch, max_concurrent_tasks=n)
        asyncio.run(run)
