"""Oban for Python side of bench/async_io.py: jobs that await BENCH_AIO_MS ms.

    python oban_aio.py prefill N     # Oban.enqueue_many, 5,000 jobs per statement

The worker is ``oban start --queues default:C`` (its CLI; C = jobs in flight), which finds
``oban_aio.Asleep`` by the dotted path stored in each job (bench/drivers is on PYTHONPATH).
"""

import asyncio
import os
import sys

import probe
from oban import Oban, worker

SECONDS = int(os.environ.get("BENCH_AIO_MS", "50")) / 1000


@worker(queue="default")
class Asleep:
    async def process(self, job):
        probe.hit(job.args.get("i", -1))
        await asyncio.sleep(SECONDS)


async def prefill(n: int) -> None:
    pool = await Oban.create_pool(os.environ["DATABASE_URL"], min_size=1, max_size=1)
    oban = Oban(pool=pool)  # not started: it enqueues only
    jobs = [Asleep.new({"i": i}) for i in range(n)]
    for k in range(0, n, 5000):
        await oban.enqueue_many(jobs[k : k + 5000])
    await pool.close()


if __name__ == "__main__":
    import oban_aio  # jobs must name oban_aio.Asleep, not __main__.Asleep

    assert sys.argv[1] == "prefill", sys.argv
    asyncio.run(oban_aio.prefill(int(sys.argv[2])))
