"""``async def`` handlers of the async runtime's tests (tests/acceptance/test_async_runtime.py).

``test.asleep`` awaits ``seconds`` then appends "id attempt pid" to $PGJOBS_TALLY;
``test.abehave`` does what its config's "do" says (see the branches below).
"""

import asyncio
import os
import time

from django_pgjobs import handler

from .models import Execution


def _tally(job):
    path = os.environ.get("PGJOBS_TALLY")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{job.id} {job.attempts} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


@handler("test.asleep", max_attempts=3)
async def asleep(job):
    await asyncio.sleep(float(job.config.get("seconds", 0.05)))
    _tally(job)


@handler("test.abehave", max_attempts=2, timeout=30)
async def abehave(job):
    do = job.config.get("do", "ok")
    seconds = float(job.config.get("seconds", 0))
    if do == "orm":  # Django's async ORM inside a handler
        await Execution.objects.acreate(
            job_id=job.id, attempt=job.attempts, worker=job.worker_id, pid=os.getpid()
        )
        return {"runs": await Execution.objects.filter(job_id=job.id).acount()}
    if do == "wait":  # until cancelled (or the seconds are up)
        await asyncio.sleep(seconds or 60)
        return {"waited": seconds}
    if do == "progress":
        for i in range(1, 4):
            job.progress(i, 3, f"step {i}")
            await asyncio.sleep(seconds)
        return {"steps": 3}
    if do == "block":  # blocks the event loop: the watchdog names this job
        time.sleep(seconds)
        return {"blocked": seconds}
    if do == "raise_on_cancel":
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise ValueError("cleanup failed while cancelling") from None
    if do == "swallow":  # ignores its cancel, keeps running a while
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
        return {"swallowed": True}
    if do == "http":
        import httpx

        async with httpx.AsyncClient(timeout=float(job.config.get("client_timeout", 2))) as c:
            response = await c.get(job.config["url"])
            response.raise_for_status()
        _tally(job)
        return {"status": response.status_code}
    if do == "return_awaitable":  # a forgotten await: returns the coroutine itself
        return asyncio.sleep(0)
    if do == "raise":
        raise RuntimeError("async boom")
    return {"ok": True}


@handler("test.sync_returns_coroutine")
def sync_returns_coroutine(job):
    return asleep(job)


@handler("test.atimeout", max_attempts=1, timeout=0.3)
async def atimeout(job):
    """Awaits past its timeout, or swallows its cancel ("swallow") for ``seconds``."""
    if job.config.get("swallow"):
        return await abehave(job)
    if job.config.get("block"):  # never awaits: blocks the loop past its timeout
        time.sleep(float(job.config["block"]))
        return None
    await asyncio.sleep(60)
