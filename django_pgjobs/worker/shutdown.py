"""The worker's graceful stop, in order: no new pass or claim, give back what no thread started,
let running jobs finish (their leases kept, their outcomes written) until ``shutdown_timeout``,
stop the threads, then give back what still runs and remove the worker's row. Each write is
retried under the claim thread's error handling (guard.py); the worker never exits with
outcomes unwritten. It reads the worker's public parts only."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .. import queries, signals
from ..sql import workers
from .completer import REFUSED
from .policy import EXIT_DATABASE_UNREACHABLE

if TYPE_CHECKING:
    from .loop import Worker

logger = logging.getLogger("django_pgjobs.worker")

JOIN_WAIT = 2.0  # seconds the executor and services threads get to end once the drain is over


def stop_gracefully(w: Worker) -> None:
    """Release unstarted jobs, let running ones finish (heartbeating), release the rest."""
    w.state.stop()
    w.services.stop()
    retry = w.guard.retry
    retry(lambda: _release_unstarted(w), attempts=3)
    _drain(w, time.monotonic() + w.options.shutdown_timeout)
    retry(lambda: _write_finished(w), attempts=3)
    if w.aio is not None:  # cancel the coroutines still running: released below
        w.aio.stop(JOIN_WAIT)
    w.handoff.close()
    join_deadline = time.monotonic() + JOIN_WAIT
    w.runner.join(join_deadline)
    if w.listener is not None:
        w.listener.stop()
    w.services.join(max(0.0, join_deadline - time.monotonic()))
    signals.job_reaped.disconnect(dispatch_uid=("pgjobs.worker", id(w)))
    retry(lambda: w.recorder.flush(w.using), attempts=2)
    if w.health_server is not None:
        w.health_server.stop()
    # Last: an abandoned handler keeps running until this process exits, so its job becomes
    # claimable elsewhere only now (not before the 2 s thread join above).
    if len(w.slots):
        retry(lambda: _release_running(w), attempts=3)
        retry(lambda: _write_finished(w), attempts=3)  # runs that ended meanwhile
    retry(lambda: workers.delete_worker(w.worker_id, using=w.using), attempts=2)
    w.session.close()
    logger.info(
        "worker %s stopped: %s jobs finished",
        w.worker_id,
        w.finished_total,
        extra={"action": "worker.stopped"},
    )


def _drain(w: Worker, deadline: float) -> None:
    """Until ``deadline``, write what ends and keep the leases of what still runs."""
    woken, guarded = w.state.woken, w.guard.guarded
    while len(w.slots) and time.monotonic() < deadline:
        if w.exit_code == EXIT_DATABASE_UNREACHABLE and not w.slots.held():
            return  # gave up on the database: only a running handler is worth waiting for
        guarded(lambda: _write_finished(w))
        guarded(lambda: w.leases.beat_if_due(time.monotonic()))
        guarded(lambda: w.progress.write_if_due(time.monotonic()))
        woken.wait(min(0.2, max(0.0, deadline - time.monotonic())))
        woken.clear()


def _write_finished(w: Worker) -> None:
    try:
        w.completer.write(w.completer.take())
    except REFUSED as exc:
        w.completer.write_singly(exc)


def _release_unstarted(w: Worker) -> None:
    if n := w.producer.give_back(w.slots.all(), reason="released unstarted at worker shutdown"):
        logger.info("released %s unstarted jobs", n, extra={"action": "worker.released"})


def _release_running(w: Worker) -> None:
    stuck = w.slots.abandon_running()
    if stuck:
        queries.release(
            [(i.job.id, i.job.lease_text) for i in stuck],
            reason=f"interrupted: still running after the {w.options.shutdown_timeout}s "
            "shutdown timeout",
            using=w.using,
        )
        logger.warning(
            "released %s jobs still running after the shutdown timeout: %s",
            len(stuck),
            ", ".join(f"{i.job.type}#{i.job.id}" for i in stuck),
            extra={"action": "worker.released_running"},
        )
