"""Producer for PgQueuer: ``Queries.enqueue`` with scalars (one job per transaction, the
connection is in autocommit) and with lists (one batch insert)."""

import asyncio
import os

import asyncpg
import clientlib
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench_pgqueuer")

# clientlib's loops are synchronous; run the coroutines on a private loop
loop = asyncio.new_event_loop()
queries: Queries | None = None


def run(coro):
    return loop.run_until_complete(coro)


async def _setup() -> Queries:
    connection = await asyncpg.connect(URL)
    return Queries(AsyncpgDriver(connection))


def enqueue_one(i: int) -> None:
    run(queries.enqueue("noop", str(i).encode()))


def enqueue_many(seqs: list[int]) -> None:
    run(queries.enqueue(["noop"] * len(seqs), [str(i).encode() for i in seqs], [0] * len(seqs)))


if __name__ == "__main__":
    queries = run(_setup())
    clientlib.main(enqueue_one, enqueue_many)
