"""The benchmark's no-op job: records its start in the shared probe and returns."""

import probe

from django_pgjobs import handler


@handler("noop")
def noop(job):
    probe.hit(job.config.get("i", -1))


@handler("asleep")
async def asleep(job):
    """bench/async_io.py: an I/O-bound job, awaiting config["ms"] milliseconds."""
    import asyncio

    probe.hit(job.config.get("i", -1))
    await asyncio.sleep(job.config.get("ms", 50) / 1000)
