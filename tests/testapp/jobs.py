"""Handlers used by the test-suite. ``test.behave`` does what its config says:

{"do": "ok" | "raise" | "fail" | "retry" | "sleep" | "block" | "hang" | "kill" | "exit" | "items"
       | "flaky" | "system_exit" | "keyboard_interrupt" | "write" | "huge_error"
       | "huge_result" | "bad_result" | "break_connection" | "wait_cancel" | "until_lease_lost",
 "seconds": float, "fail_times": int, "value": ...}
Every run is logged in testapp.Execution first.
"""

import os
import signal
import threading
import time

from django.db import DatabaseError, connection, transaction

from django_pgjobs import Fail, Retry, handler

from .leases import steal_lease
from .models import Effect, Execution


def _log(job):
    Execution.objects.create(
        job_id=job.id, attempt=job.attempts, worker=job.worker_id, pid=os.getpid()
    )


def _done(job):
    Execution.objects.filter(job_id=job.id, attempt=job.attempts).update(
        finished_at=__import__("django.utils.timezone", fromlist=["now"]).now()
    )


@handler("test.noop")
def noop(job):
    return None


@handler("test.tally")
def tally(job):
    """A run too short for a database write: one line appended to $PGJOBS_TALLY (O_APPEND, so
    lines from several processes never interleave)."""
    fd = os.open(os.environ["PGJOBS_TALLY"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{job.id} {job.attempts} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


@handler("test.echo")
def echo(job):
    return {"echo": job.config}


@handler("test.behave", max_attempts=3, timeout=20)
def behave(job):
    _log(job)
    do = job.config.get("do", "ok")
    seconds = float(job.config.get("seconds", 0))
    if do == "ok":
        pass
    elif do == "raise":
        raise ValueError(job.config.get("message", "boom"))
    elif do == "fail":
        raise Fail("given up on purpose")
    elif do == "retry":
        raise Retry("later please", delay=seconds)
    elif do == "flaky":
        if job.attempts <= int(job.config.get("fail_times", 1)):
            raise RuntimeError(f"flaky failure on attempt {job.attempts}")
    elif do == "sleep":
        time.sleep(seconds)
    elif do == "block":  # sleeps without clock_nanosleep(), which libfaketime breaks
        threading.Event().wait(seconds)
    elif do == "hang":
        time.sleep(3600)
    elif do == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif do == "exit":  # like a crash in C code: no exception, no cleanup
        if job.attempts <= int(job.config.get("fail_times", job.max_attempts)):
            os._exit(17)
    elif do == "system_exit":
        raise SystemExit(3)
    elif do == "keyboard_interrupt":
        raise KeyboardInterrupt
    elif do == "items":
        for i in range(int(job.config.get("n", 3))):
            if i % 2:
                job.add_item_error(item=i, error=f"item {i} is odd")
        _done(job)
        return {"processed": int(job.config.get("n", 3))}
    elif do == "write":
        with transaction.atomic():
            Effect.objects.create(job_id=job.id, value=str(job.config.get("value", "")))
    elif do == "huge_error":
        raise ValueError("x" * 2_000_000)
    elif do == "huge_result":
        _done(job)
        return {"blob": "y" * 3_000_000}
    elif do == "bad_result":
        return {"when": object()}
    elif do == "break_connection":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    elif do == "until_lease_lost":  # the first attempt runs until told its lease is gone
        if job.attempts == 1:
            return _until_lease_lost(job, seconds)
    elif do == "wait_cancel":
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not job.cancel_requested:
            time.sleep(0.05)
        _done(job)
        return {"cancelled": job.cancel_requested}
    else:
        raise Fail(f"unknown behaviour {do!r}")
    _done(job)
    return {"did": do, "attempt": job.attempts}


def _until_lease_lost(job, seconds):
    """Wait for job.lease_lost (at most ``seconds``); say when on stdout (the database may be
    out of reach) and in an Effect row when it can be written."""
    started = time.monotonic()
    while not job.lease_lost and time.monotonic() - started < seconds:
        time.sleep(0.02)
    print(f"handler: job {job.id} lease_lost={job.lease_lost} at {time.time():.3f}", flush=True)
    try:
        Effect.objects.create(job_id=job.id, value=f"lease_lost={job.lease_lost}")
    except DatabaseError:
        pass
    return {"lease_lost_seen": job.lease_lost}


@handler("test.connection_options")
def connection_options(job):
    """What this thread's connection was opened with (libpq) and runs with (the server)."""
    connection.ensure_connection()
    client = connection.connection.info.get_parameters()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('tcp_keepalives_idle', "
            "'tcp_keepalives_interval', 'tcp_keepalives_count', 'tcp_user_timeout', "
            "'client_connection_check_interval')"
        )
        server = dict(cur.fetchall())
    return {
        "client": {
            k: v
            for k, v in client.items()
            if k.startswith(("keepalives", "tcp_", "connect_timeout"))
        },
        "server": server,
    }


@handler("test.async")
async def async_handler(job):
    return {"async": True, "n": job.config.get("n")}


@handler("test.tx", transactional=True, max_attempts=2)
def transactional_write(job):
    """Writes an Effect in the completion's transaction (exactly-once effects)."""
    Effect.objects.create(job_id=job.id, value=str(job.config.get("value", "x")))
    if job.config.get("steal"):  # another worker takes the job over while this run is in flight
        steal_lease(job.id)
    if job.config.get("sleep"):
        time.sleep(float(job.config["sleep"]))  # a window for a kill -9 from outside
    if job.attempts <= int(job.config.get("kill_times", 0)):
        os.kill(os.getpid(), signal.SIGKILL)  # dies with its write not committed
    if job.config.get("raise"):
        raise ValueError("rolled back with the job")
    return {"wrote": 1}


# Register the test.outcome.* handlers and those of the operator tests (tests/acceptance/ops).
from . import async_jobs, ops_jobs, outcome_jobs  # noqa: E402,F401
