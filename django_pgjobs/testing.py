"""Helpers for your tests, for both APIs (``@handler`` jobs and Django ``@task`` functions).

They work inside Django's ``TestCase`` (the jobs live in the test's transaction) as well as in
``TransactionTestCase`` / ``@pytest.mark.django_db(transaction=True)``::

    from django_pgjobs.testing import assert_enqueued, capture_enqueued, eager, run_jobs

    signup(email="a@example.com")
    assert_enqueued(send_welcome, args=[user.id])       # a Task, or a job type string
    run_jobs()                                          # runs due jobs through the real worker
    run_jobs(now=timezone.now() + timedelta(hours=1))   # ... and those due within the hour

    with capture_enqueued() as jobs:                    # only what this block enqueued
        checkout(cart)
    jobs.assert_enqueued("shop.charge", config={"cart": cart.id})

    with eager():                                       # every enqueue runs its job at once
        result = send_welcome.enqueue(user.id)
    assert result.status == TaskResultStatus.SUCCESSFUL

``run_jobs`` is the worker's own code (claim, execute, finalize, signals, retries) with one
difference: jobs run on the calling thread, so that they see the test's uncommitted rows, and
handler timeouts are not enforced. Inside a ``TestCase`` the database clock stands still (it is
the transaction's start time), so a retry scheduled "in 5 seconds" only runs when you pass a
later ``now``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

from django.utils import timezone

from . import conf, queries, signals
from .registry import TASK_TYPE_PREFIX
from .status import JobStatus
from .worker import Worker, WorkerOptions

if TYPE_CHECKING:
    from .tasks_api import Task

__all__ = [
    "CapturedJobs",
    "assert_enqueued",
    "assert_not_enqueued",
    "capture_enqueued",
    "eager",
    "run_jobs",
]

_state = threading.local()


# --- run_jobs ----------------------------------------------------------------------------------


def run_jobs(
    now: datetime | None = None,
    *,
    queues: Sequence[str] | None = None,
    max_jobs: int = 1000,
    using: str | None = None,
) -> list[Any]:
    """Run every due job, and every job (or retry) that falls due meanwhile, until none is left.

    ``now``: also run the jobs due by then (deferred jobs, retries waiting for their backoff);
    they are made due with the operator's "run now" query, then claimed by the worker's claim.
    ``queues``: only these queues. Returns the jobs that ran (refreshed), in id order.
    Raises ``RuntimeError`` past ``max_jobs`` runs (a job that enqueues itself forever?).
    """
    alias = using or conf.get("DATABASE")
    if now is not None and timezone.is_naive(now):
        raise ValueError("run_jobs(now=...) needs an aware datetime (django.utils.timezone.now())")
    worker = Worker(
        WorkerOptions.from_settings(
            inline=True,
            burst=True,
            listen=False,
            install_signal_handlers=False,
            concurrency=1,
            queues=list(queues) if queues else None,
            worker_id="pgjobs-testing",
            using=alias,
        )
    )
    ran: list[int] = []

    def seen(sender: str, job: Any, applied: bool, **kwargs: Any) -> None:
        if applied and job.id not in ran:
            ran.append(job.id)

    signals.job_finished.connect(seen, weak=False, dispatch_uid=("pgjobs.testing", id(worker)))
    outer, _state.running = getattr(_state, "running", False), True
    worker.start()
    try:
        _run_until_idle(worker, now, queues, alias, max_jobs)
    finally:
        worker.shutdown()
        _state.running = outer
        signals.job_finished.disconnect(dispatch_uid=("pgjobs.testing", id(worker)))
    from .models import Job

    return list(Job.objects.using(alias).filter(id__in=ran).order_by("id"))


def _run_until_idle(
    worker: Worker, now: datetime | None, queues: Sequence[str] | None, alias: str, limit: int
) -> None:
    _make_due(now, queues, alias)
    while True:
        finished = worker.finished_total
        claimed = worker.run_once()  # finalize the last round, then claim and run, inline
        due = _make_due(now, queues, alias)  # retries the last round scheduled before `now`
        if not claimed and not due and worker.finished_total == finished:
            return
        if worker.claimed_total > limit:
            raise RuntimeError(
                f"run_jobs() ran more than {limit} jobs and more are due: does a job enqueue "
                "itself? Raise max_jobs if this is expected."
            )


def _make_due(now: datetime | None, queues: Sequence[str] | None, alias: str) -> int:
    """Pending jobs due by ``now`` become due at the database clock; returns how many."""
    if now is None:
        return 0
    from .models import Job

    pending = Job.objects.using(alias).filter(status=JobStatus.PENDING, run_after__lte=now)
    if queues:
        pending = pending.filter(queue__in=list(queues))
    ids = list(pending.values_list("id", flat=True))
    return len(queries.run_now(ids, using=alias)) if ids else 0


# --- eager mode --------------------------------------------------------------------------------


@contextmanager
def eager() -> Iterator[None]:
    """Within the block, every ``enqueue()`` (and ``@task`` ``.enqueue()``) runs due jobs at once,
    on this thread, before returning: the returned job or TaskResult shows the outcome.

    Like ``run_jobs()`` after each enqueue: deferred jobs still wait for their time, retries
    for their backoff. The job runs inside the caller's transaction, before it commits.
    ``enqueue_many()`` is not eager (call ``run_jobs()``). Also usable as a decorator.
    """
    uid = ("pgjobs.testing.eager", threading.get_ident())
    signals.job_enqueued.connect(_run_eagerly, weak=False, dispatch_uid=uid)
    try:
        yield
    finally:
        signals.job_enqueued.disconnect(dispatch_uid=uid)


def _run_eagerly(sender: str, job: Any, **kwargs: Any) -> None:
    if getattr(_state, "running", False):
        return  # enqueued by a job that run_jobs() is running: its loop claims this one next
    run_jobs(using=job._state.db)
    job.refresh_from_db()


# --- what was enqueued -------------------------------------------------------------------------


def assert_enqueued(
    what: Task | str | None = None,
    *,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    status: str | None = None,
    count: int | None = None,
    using: str | None = None,
) -> list[Any]:
    """Assert that jobs matching everything given exist (``count``: exactly that many).

    ``what`` is a ``@task`` (``args``/``kwargs`` compare its arguments, JSON-normalised) or a
    job type (``config`` compares the whole config). Returns the matching jobs.
    """
    return _assert_enqueued(
        _jobs(using),
        what,
        count=count,
        args=args,
        kwargs=kwargs,
        config=config,
        queue=queue,
        priority=priority,
        status=status,
    )


def assert_not_enqueued(
    what: Task | str | None = None, *, using: str | None = None, **filters: Any
) -> None:
    """Assert that no job matches (same filters as :func:`assert_enqueued`)."""
    _assert_enqueued(_jobs(using), what, count=0, **filters)


class CapturedJobs(Sequence[Any]):
    """The jobs written since the block began (until it ended), read from the database."""

    def __init__(self, using: str | None = None):
        self.using = using or conf.get("DATABASE")
        self._after = _last_id(self.using)
        self._until: int | None = None

    def close(self) -> None:
        self._until = _last_id(self.using)

    @property
    def jobs(self) -> list[Any]:
        qs = _jobs(self.using).filter(id__gt=self._after)
        if self._until is not None:
            qs = qs.filter(id__lte=self._until)
        return list(qs.order_by("id"))

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.jobs[index]

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.jobs)

    def assert_enqueued(
        self, what: Task | str | None = None, *, count: int | None = None, **filters: Any
    ) -> list[Any]:
        return _assert_enqueued(self.jobs, what, count=count, **filters)

    def assert_not_enqueued(self, what: Task | str | None = None, **filters: Any) -> None:
        _assert_enqueued(self.jobs, what, count=0, **filters)


@contextmanager
def capture_enqueued(using: str | None = None) -> Iterator[CapturedJobs]:
    """``with capture_enqueued() as jobs:`` — the jobs enqueued inside the block, in order.

    Rows are read from the database, so every path counts (``enqueue``, ``enqueue_many``,
    ``@task``, cron); a deduplicated enqueue adds nothing; a rolled-back one is gone.
    """
    captured = CapturedJobs(using)
    try:
        yield captured
    finally:
        captured.close()


# --- matching ----------------------------------------------------------------------------------


def _jobs(using: str | None) -> Any:
    from .models import Job

    return Job.objects.using(using or conf.get("DATABASE")).order_by("id")


def _last_id(using: str) -> int:
    last = _jobs(using).order_by("-id").values_list("id", flat=True).first()
    return last or 0


def _assert_enqueued(
    jobs: Any, what: Task | str | None, *, count: int | None, **filters: Any
) -> list[Any]:
    jobs = list(jobs)
    wanted = _describe(what, filters)
    matching = [j for j in jobs if _matches(j, what, **filters)]
    if (count is None and matching) or (count is not None and len(matching) == count):
        return matching
    expected = "at least one" if count is None else str(count)
    listing = "\n".join(f"  {_summary(j)}" for j in jobs[:20]) or "  (none)"
    raise AssertionError(
        f"expected {expected} job(s) matching {wanted}, found {len(matching)}.\n"
        f"Jobs ({len(jobs)}):\n{listing}"
    )


def _type_of(what: Task | str | None) -> str | None:
    if what is None or isinstance(what, str):
        return what
    from .tasks_registry import job_type  # a Task: the Tasks framework is installed

    return job_type(what)


def _matches(
    job: Any,
    what: Task | str | None,
    *,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    status: str | None = None,
) -> bool:
    expected_type = _type_of(what)
    cfg = job.config or {}
    if args is not None or kwargs is not None:  # a @task's arguments: the Tasks API is there
        from .tasks_api import normalize_json
    checks = [
        expected_type is None or job.type == expected_type,
        args is None or cfg.get("args") == normalize_json(list(args)),
        kwargs is None or cfg.get("kwargs") == normalize_json(dict(kwargs)),
        config is None or cfg == config,
        queue is None or job.queue == queue,
        priority is None or job.priority == priority,
        status is None or job.status == status,
    ]
    return all(checks)


def _describe(what: Task | str | None, filters: dict[str, Any]) -> str:
    parts = [_type_of(what) or "any type"]
    parts += [f"{k}={v!r}" for k, v in filters.items() if v is not None]
    return " ".join(parts)


def _summary(job: Any) -> str:
    cfg = job.config or {}
    if job.type.startswith(TASK_TYPE_PREFIX):
        inputs = f"args={cfg.get('args')!r} kwargs={cfg.get('kwargs')!r}"
    else:
        inputs = f"config={cfg!r}"
    return f"{job.type}#{job.id} {inputs} queue={job.queue} priority={job.priority} {job.status}"
