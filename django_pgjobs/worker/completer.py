"""The completer: the one owner of every job's outcome write. It collects the outcomes of
finished runs, writes them, and once they are written frees their slots, counts, logs and
signals them.

Who writes a job's outcome: this module, on one of three paths, each write fenced by the run's
lease (status, attempt, token: no row matched means the lease was lost, and nothing is
overwritten):

    with the claim     write_with_claim(): the batch rides in the producer's claim, one round
                       trip (queries.finalize_and_claim); Producer.finalize_and_claim calls it
    on its own         Completer.write() (queries.finalize): when no claim follows (capped
                       queues, shutdown), and job by job after a refusal (write_singly)
    in a transaction   finalize_in_transaction(): a transactional handler's outcome, written
                       inside the handler's transaction, which executor.py opens and calls it
                       in (exactly-once effects); the completer later only settles it
                       (``Completion.written``)

Nothing else writes an outcome: executor.py turns a run into a Completion; leases.py (timeouts)
and producer.py (a config that cannot be decoded) hand theirs over through ``put()``.

Executor threads ``put()`` outcomes; the main thread ``take()``s a batch, writes it (usually in
the claim's round trip, see producer.py) and ``settle()``s it. A batch stays in ``unwritten``
until the database took it: a connection error keeps it for the next step. A batch the database
refuses for its data is written again one job at a time (``write_singly``), so that only the
offending job is affected.
"""

from __future__ import annotations

import logging
import queue
from typing import Any

from django.db import DataError, IntegrityError

from .. import queries, signals
from ..context import JobContext
from ..queries import ClaimedRow, Completion
from ..rollup import Recorder
from ..status import JobStatus
from . import console
from .slots import InFlight, Slots
from .storable import storable_text

logger = logging.getLogger("django_pgjobs.worker")

Finished = tuple[InFlight, Completion]
REFUSED = (DataError, IntegrityError)  # the database refused the data, not the connection

_JOB_FMT = "%s#%s queue=%s attempt=%s/%s duration_ms=%s trace_id=%s"
_SUCCESS_FMT = "%s " + _JOB_FMT  # the action, then the job
_SUCCESS: dict[str, str] = {
    JobStatus.COMPLETED: "job.completed",  # logged at INFO, with this action
    JobStatus.COMPLETED_WITH_ERRORS: "job.completed_with_errors",
}


class Completer:
    def __init__(self, slots: Slots, recorder: Recorder, using: str) -> None:
        self.slots = slots
        self.recorder = recorder
        self.using = using
        self._finished: queue.SimpleQueue[Finished] = queue.SimpleQueue()
        self.unwritten: list[Finished] = []  # taken, not yet in the database
        self.total = 0  # outcomes settled

    def put(self, item: InFlight, completion: Completion) -> int:
        """Hand over a run's outcome (any thread); returns how many wait (a hint)."""
        item.job.detach_progress()  # its last progress travels with the outcome
        self._finished.put((item, completion))
        return self._finished.qsize()

    def waiting(self) -> int:
        return self._finished.qsize()

    def idle(self) -> bool:
        return self._finished.empty() and not self.unwritten

    def take(self) -> list[Finished]:
        """Every outcome not yet written; they stay in ``unwritten`` until settled."""
        batch = self.unwritten
        try:
            while True:
                batch.append(self._finished.get_nowait())
        except queue.Empty:
            pass
        self.unwritten = batch
        return batch

    @staticmethod
    def to_write(batch: list[Finished]) -> list[Completion]:
        """The completions of ``batch`` still to write: not those a transactional handler
        wrote itself, nor those of runs whose lease ran out by our clock (leases.py)."""
        return [c for item, c in batch if not c.written and not item.job.lease_lost]

    def write(self, batch: list[Finished]) -> None:
        """Write ``batch`` on its own (no claim) and settle it."""
        if batch:
            self.settle(batch, queries.finalize(self.to_write(batch), using=self.using))

    def write_singly(self, refused: Exception) -> None:
        """The database refused a batch (``refused``): write its outcomes one by one; one it
        refuses again becomes that job's failure, saying why."""
        batch = self.take()
        logger.error(
            "the database refused a batch of %s outcomes (%s); writing them one by one",
            len(batch),
            _one_line(refused),
            extra={"action": "worker.batch_refused"},
        )
        written: set[int] = set()
        for item, completion in batch:
            if not completion.written and not item.job.lease_lost:
                written |= self._write_one(completion)
        self.settle(batch, written)

    def _write_one(self, c: Completion) -> set[int]:
        try:
            return queries.finalize([c], using=self.using)
        except REFUSED as exc:
            outcome = ascii(c.error or c.result)[:2000]
            failure = Completion(
                id=c.id,
                token=c.token,
                attempt=c.attempt,
                status=JobStatus.FAILED,
                duration_ms=c.duration_ms,
                note="failed",
                fan_in=c.fan_in,
                error=(
                    f"the worker could not store this run's outcome ({_one_line(exc)}); "
                    f"the outcome was {c.status}: {outcome}"
                ),
            )
            c.status, c.error, c.result, c.delay, c.run_at = (
                failure.status,
                failure.error,
                None,
                None,
                None,
            )
        try:
            return queries.finalize([failure], using=self.using)
        except REFUSED as exc:  # left to the reaper once the lease expires
            logger.error(
                "job %s: its failure could not be stored either (%s)",
                c.id,
                _one_line(exc),
                extra={"action": "worker.outcome_lost", "job_id": c.id},
            )
            return set()

    def settle(self, batch: list[Finished], written: set[int]) -> None:
        """The outcomes are in the database (those in ``written``; the others lost their
        lease): free the slots, count, log, signal."""
        self.unwritten = []
        written = written | {c.id for _, c in batch if c.written}
        self.slots.remove([c.id for _, c in batch])
        self.total += len(batch)
        self.recorder.record_finished(
            (item.job.queue, item.job.type, c) for item, c in batch if c.id in written
        )
        log_successes = logger.isEnabledFor(logging.INFO)
        # runjobs' own console alone gets the success lines: a batch's, a few dozen per write
        direct = console.direct_handler(logger) if log_successes else None
        lines: list[str] = []
        for item, completion in batch:
            applied = completion.id in written
            if direct is not None and applied and completion.status in _SUCCESS:
                lines.append(
                    _SUCCESS_FMT % (_SUCCESS[completion.status], *_job_args(item.job, completion))
                )
            elif log_successes or not applied or completion.status not in _SUCCESS:
                if lines:  # keep the lines in order (only the direct path collects them)
                    assert direct is not None
                    direct.write_messages(logger.name, logging.INFO, lines)
                    lines = []
                _log_finished(item, completion, applied)
            send_robust(
                signals.job_finished,
                sender=item.job.type,
                job=item.job,
                completion=completion,
                applied=applied,
            )
        if lines:
            assert direct is not None
            direct.write_messages(logger.name, logging.INFO, lines)


def write_with_claim(
    completions: list[Completion], **claim: Any
) -> tuple[set[int], list[ClaimedRow]]:
    """Write ``completions`` in the producer's claim (``claim``: its arguments), one round trip:
    the ids written and the rows claimed."""
    return queries.finalize_and_claim(completions, **claim)


def finalize_in_transaction(done: Completion, using: str) -> bool:
    """Write a transactional handler's outcome inside its open transaction (executor.py);
    False: the lease was lost, and the caller must roll the transaction back."""
    if done.id not in queries.finalize([done], using=using):
        return False
    done.written = True
    return True


def send_robust(signal: Any, **kwargs: Any) -> None:
    """Send ``signal``; a receiver that raises is logged, and the others still run."""
    for receiver, result in signal.send_robust(**kwargs):
        if isinstance(result, Exception):
            logger.error(
                "a receiver of a django-pgjobs signal failed: %r",
                receiver,
                exc_info=result,
                extra={"action": "worker.receiver_error"},
            )


def _log_finished(item: InFlight, c: Completion, applied: bool) -> None:
    job = item.job
    extra = {"job_id": job.id, "job_type": job.type, "trace_id": job.trace_id}
    if not applied:
        logger.warning(
            "job.lease_lost %s#%s: outcome %s discarded, the lease was lost",
            job.type,
            job.id,
            c.status,
            extra={**extra, "action": "job.lease_lost"},
        )
        return
    args = _job_args(job, c)
    if c.status in _SUCCESS:
        action = _SUCCESS[c.status]
        extra["action"] = action
        if not _STOCK_LOGGER:  # a Logger class of the project's: its info() may add to it
            logger.info(_SUCCESS_FMT, action, *args, extra=extra)
        elif logger.isEnabledFor(logging.INFO):  # logger.info() without its search of the
            # stack for the caller (known: here), about a sixth of this line's cost
            logger.handle(
                logger.makeRecord(
                    logger.name,
                    logging.INFO,
                    __file__,
                    _SUCCESS_LINENO,
                    _SUCCESS_FMT,
                    (action, *args),
                    None,
                    "_log_finished",
                    extra,
                )
            )
    elif c.status == JobStatus.CANCELLED:
        logger.warning(
            "job.cancelled " + _JOB_FMT + ": %s",  # noqa: G003 - constants
            *args,
            _summary(c.error),
            extra={**extra, "action": "job.cancelled"},
        )
    elif c.status == JobStatus.PENDING:
        when = f"at {c.run_at.isoformat()}" if c.run_at else f"in {c.delay or 0:.1f}s"
        logger.warning(
            "job.retry_scheduled " + _JOB_FMT + " retry %s: %s",  # noqa: G003 - constants
            *args,
            when,
            _summary(c.error),
            extra={**extra, "action": "job.retry_scheduled"},
        )
    else:
        logger.error(
            "job.failed " + _JOB_FMT + ": %s",  # noqa: G003 - constants
            *args,
            _summary(c.error),
            extra={**extra, "action": "job.failed"},
        )


# The line the per-job success records name as theirs (_log_finished builds them itself),
# unless a Logger class set by the project (logging.setLoggerClass) has its own info() or _log().
_SUCCESS_LINENO = _log_finished.__code__.co_firstlineno
_STOCK_LOGGER = (
    type(logger).info is logging.Logger.info and type(logger)._log is logging.Logger._log
)


def _job_args(job: JobContext, c: Completion) -> tuple[Any, ...]:
    """_JOB_FMT's arguments."""
    return (
        job.type,
        job.id,
        job.queue,
        job.attempts,
        job.max_attempts,
        c.duration_ms,
        job.trace_id,
    )


def _summary(text: str | None) -> str:
    if not text:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _one_line(exc: BaseException) -> str:
    return storable_text(f"{exc.__class__.__name__}: {' '.join(str(exc).split())[:300]}")
