"""Producer for Oban for Python: ``Noop.enqueue()`` (one job per transaction) and
``Oban.enqueue_many()`` (one call), through an ``Oban`` instance without queues (a client that
runs no jobs), on one event loop kept across the calls."""

import asyncio
import atexit
import os

import clientlib
from oban import Oban
from oban_app import Noop

loop = asyncio.new_event_loop()


pool = loop.run_until_complete(Oban.create_pool(os.environ["DATABASE_URL"], min_size=1, max_size=1))
oban = Oban(pool=pool)  # not started: it enqueues only (no plugins, no queues)
atexit.register(lambda: loop.run_until_complete(pool.close()))


def enqueue_one(i: int) -> None:
    loop.run_until_complete(Noop.enqueue({"i": i}))


def enqueue_many(seqs: list[int]) -> None:
    jobs = [Noop.new({"i": i}) for i in seqs]
    for k in range(0, len(jobs), 5_000):  # one statement per 5,000 jobs (parameter limits)
        loop.run_until_complete(oban.enqueue_many(jobs[k : k + 5_000]))


if __name__ == "__main__":
    clientlib.main(enqueue_one, enqueue_many)
