"""The jobs table (the seed's `jobs`, plus queue, priority and lease columns) and live workers.

Every state change of a job goes through ``queries.py``; the model is for reading, the admin and
the ORM-minded user.
"""

from __future__ import annotations

import re

from django.db import models
from django.db.models import BooleanField, F, Func, Q
from django.db.models.functions import Now

from .status import ACTIVE_STATUSES, EDGE_MODES, ON_FAILURE, JobStatus
from .tables import (
    DEPENDENCY_TABLE,
    DEPTH_SAMPLE_TABLE,
    JOB_TABLE,
    QUEUE_TABLE,
    RATE_TABLE,
    SCHEDULE_FIRE_TABLE,
    SCHEDULE_TABLE,
    SHARE_TABLE,
    STAT_MINUTE_TABLE,
    UNIQUE_TABLE,
    WORKER_TABLE,
    WORKFLOW_TABLE,
)
from .validation import PRIORITY_MAX, PRIORITY_MIN, QUEUE_NAME_DB_PATTERN

PROBLEM_STATUSES = (JobStatus.FAILED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.CANCELLED)


class TextIn(Func):
    """``expression IN (values)`` written as ``expression::text = ANY('{values}'::text[])``.

    PostgreSQL reads a CHECK constraint's stored expression tree again, and plans it, at every
    INSERT or UPDATE statement. ``IN`` over a varchar column stores one cast constant per value
    and an array cast; one text[] constant is a smaller tree and cheaper to check (a one-job
    enqueue is one statement). ``values`` are identifiers: they are written into the SQL.
    """

    template = "%(expressions)s::text = ANY('{%(values)s}'::text[])"
    output_field = BooleanField()

    def __init__(self, expression: str | F, values: list[str] | tuple[str, ...]) -> None:
        bad = [v for v in values if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v)]
        if bad or not values:
            raise ValueError(f"TextIn takes identifiers, got {list(values)!r}")
        super().__init__(expression, values=",".join(values))


class QueueManager(models.Manager):
    """The default manager of every model here: querysets on PGJOBS["DATABASE"], so the admin
    and ``Job.objects`` read the queue's database with or without QueueRouter (routers.py).
    ``.using(alias)`` still picks another."""

    def get_queryset(self) -> models.QuerySet:
        from . import conf

        using = self._db or conf.get("DATABASE")  # Manager's own attributes, absent from the stubs
        return self._queryset_class(model=self.model, using=using, hints=self._hints)  # type: ignore[attr-defined]


class Job(models.Model):
    # GENERATED ALWAYS AS IDENTITY (set in the migration): the application never picks an id.
    id = models.BigAutoField(primary_key=True)
    tenant_id = models.CharField(max_length=255, null=True, blank=True)
    type = models.CharField(max_length=255)
    operated_by = models.CharField(
        max_length=255, null=True, blank=True, help_text="Who asked for the job (a user id)."
    )
    queue = models.CharField(max_length=63, default="default", db_default="default")
    priority = models.SmallIntegerField(default=0, db_default=0, help_text="Higher runs first.")
    status = models.CharField(
        max_length=32,
        choices=JobStatus.choices,
        default=JobStatus.PENDING,
        db_default=JobStatus.PENDING,
    )
    config = models.JSONField(default=dict, db_default={}, help_text="Immutable inputs.")
    result = models.JSONField(default=dict, db_default={}, help_text="Merged as the job runs.")
    error = models.TextField(null=True, blank=True)
    trace_id = models.CharField(max_length=255, null=True, blank=True)
    unique_key = models.CharField(
        max_length=255,
        null=True,
        blank=True,
        help_text="While a job with this key is pending or running, enqueue returns it.",
    )
    # The flow key (docs/flow-control.md): per-key limits and rates of a controlled queue.
    flow_key = models.CharField(max_length=255, null=True, blank=True)
    attempts = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField(default=5, db_default=5)
    run_after = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    # The lease: who runs the job, with which token, until when.
    locked_by = models.CharField(max_length=255, null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False, db_default=False)
    # One entry per attempt that did not end the job (retry, lease expiry, shutdown release).
    history = models.JSONField(default=list, db_default=[], blank=True)
    # What the handler last reported with job.progress(): {"done", "total", "note", "at"}.
    progress = models.JSONField(null=True, blank=True)
    # enqueue(debounce=...): enqueues of this key merge into its one unclaimed PENDING job.
    debounce_key = models.CharField(max_length=255, null=True, blank=True)
    # The priority given at enqueue, kept once aging (PGJOBS["AGING"]) has lifted `priority`.
    base_priority = models.SmallIntegerField(null=True, blank=True)
    # Workflows (workflows.py): the step this job is, and its dependencies' counters, written
    # by the fan-in of the statement that ends each dependency (queries.py).
    workflow_id = models.BigIntegerField(null=True, blank=True)
    step = models.CharField(max_length=255, null=True, blank=True)
    deps_open = models.IntegerField(default=0, db_default=0, help_text="Dependencies not ended.")
    deps_failed = models.IntegerField(default=0, db_default=0, help_text="Dependencies failed.")
    has_dependants = models.BooleanField(default=False, db_default=False)

    objects = QueueManager()

    class Meta:
        db_table = JOB_TABLE
        ordering = ["-id"]
        constraints = [
            # The state machine's states (status IN (...), in a form cheaper to check: TextIn).
            models.CheckConstraint(
                condition=TextIn("status", JobStatus.values), name="pgjobs_job_status_valid"
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="pgjobs_job_attempts_gte_0"),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="pgjobs_job_max_attempts_gte_1"
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN) & Q(priority__lte=PRIORITY_MAX),
                name="pgjobs_job_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=QUEUE_NAME_DB_PATTERN), name="pgjobs_job_queue_name"
            ),
            # A RUNNING job always has a lease; nothing else has one.
            models.CheckConstraint(
                condition=(
                    Q(
                        status=JobStatus.RUNNING,
                        lease_token__isnull=False,
                        lease_expires_at__isnull=False,
                    )
                    | (~Q(status=JobStatus.RUNNING) & Q(lease_token__isnull=True))
                ),
                name="pgjobs_job_lease_iff_running",
            ),
            models.UniqueConstraint(
                fields=["unique_key"],
                condition=Q(unique_key__isnull=False, status__in=ACTIVE_STATUSES),
                name="pgjobs_job_unique_key_active",
            ),
            # Debounce: one open job per (type, key), i.e. PENDING and never claimed (an empty
            # history: every way back to PENDING, retry, release, reap, appends an entry), so
            # that a retried or released job never collides with the open one.
            models.UniqueConstraint(
                fields=["type", "debounce_key"],
                condition=Q(debounce_key__isnull=False)
                & Q(status=JobStatus.PENDING)
                & Q(history=[]),
                name="pgjobs_job_debounce_open",
            ),
        ]
        indexes = [
            # The claim: pending jobs in claim order. Partial, so finished jobs never weigh on it.
            models.Index(
                F("priority").desc(),
                "run_after",
                "id",
                name="pgjobs_job_claim_idx",
                condition=Q(status=JobStatus.PENDING),
            ),
            # Fair share (PGJOBS["FAIR_SHARE"]): pending jobs grouped by tenant, in claim order.
            models.Index(
                "tenant_id",
                F("priority").desc(),
                "run_after",
                "id",
                name="pgjobs_job_fair_idx",
                condition=Q(status=JobStatus.PENDING, tenant_id__isnull=False),
            ),
            # Controlled queues (queries.claim_controlled): each key's head by a loose index
            # scan, and its RUNNING jobs counted. Keyless jobs are in neither.
            models.Index(
                "queue",
                "flow_key",
                F("priority").desc(),
                "run_after",
                "id",
                name="pgjobs_job_flow_pending_idx",
                condition=Q(status=JobStatus.PENDING, flow_key__isnull=False),
            ),
            models.Index(
                "queue",
                "flow_key",
                name="pgjobs_job_flow_running_idx",
                condition=Q(status=JobStatus.RUNNING, flow_key__isnull=False),
            ),
            # The reaper: running jobs by lease expiry.
            models.Index(
                "lease_expires_at",
                name="pgjobs_job_lease_idx",
                condition=Q(status=JobStatus.RUNNING),
            ),
            # The seed's listing index.
            models.Index(
                "type", "tenant_id", F("created_at").desc(), name="pgjobs_job_type_tenant_idx"
            ),
            # The seed's stats index: finished jobs by time, covering what percentiles need.
            models.Index(
                "finished_at",
                name="pgjobs_job_stats_idx",
                include=["type", "duration_ms", "status"],
                condition=Q(finished_at__isnull=False),
            ),
            # Trace id search, exact or by prefix (pattern ops: LIKE 'abc%' uses it in any
            # collation).
            models.Index(
                fields=["trace_id"],
                name="pgjobs_job_trace_idx",
                condition=Q(trace_id__isnull=False),
                opclasses=["varchar_pattern_ops"],
            ),
            # enqueue_on_commit's key, in any status (the unique constraint covers active jobs).
            models.Index(
                fields=["unique_key"],
                name="pgjobs_job_unique_key_idx",
                condition=Q(unique_key__isnull=False),
            ),
            # The admin's problem filters (failed, cancelled, has error): few rows, newest first.
            models.Index(
                fields=["status", "-id"],
                name="pgjobs_job_problem_idx",
                condition=Q(error__isnull=False) | Q(status__in=PROBLEM_STATUSES),
            ),
            # Retention of the rare finished statuses, oldest first: through the stats index the
            # pruner walked every COMPLETED job before the cutoff (docs/performance.md).
            models.Index(
                fields=["status", "finished_at"],
                name="pgjobs_job_prune_idx",
                condition=Q(status__in=PROBLEM_STATUSES),
            ),
            # A workflow's steps (job.upstream, the admin's filter); plain jobs are not in it.
            models.Index(
                fields=["workflow_id", "step"],
                name="pgjobs_job_workflow_idx",
                condition=Q(workflow_id__isnull=False),
            ),
        ]
        # Admin actions, each behind its own permission (delete uses Django's delete_job).
        permissions = [
            ("retry_job", "Can retry failed, cancelled or completed-with-errors jobs"),
            ("run_job_now", "Can make scheduled or retrying jobs due now"),
            ("cancel_job", "Can cancel pending or running jobs"),
            ("duplicate_job", "Can enqueue a copy of a job"),
        ]

    def __str__(self) -> str:
        return f"{self.type}#{self.id} ({self.status})"


class UniqueWindow(models.Model):
    """enqueue(unique_key=..., unique_for=...): the key is taken until ``until``, whatever
    becomes of the job (finished, pruned). Written by the job's own INSERT statement."""

    key = models.CharField(max_length=255, primary_key=True)
    job_id = models.BigIntegerField(help_text="The job that opened the window.")
    until = models.DateTimeField()

    objects = QueueManager()

    class Meta:
        db_table = UNIQUE_TABLE
        ordering = ["key"]
        indexes = [models.Index(fields=["until"], name="pgjobs_unique_until_idx")]

    def __str__(self) -> str:
        return f"{self.key} until {self.until.isoformat()}"


class Workflow(models.Model):
    """A set of jobs linked by dependencies (workflows.py). Its state is its jobs' states."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=255)
    on_failure = models.CharField(max_length=16, default="cancel", db_default="cancel")
    created_at = models.DateTimeField(db_default=Now())

    objects = QueueManager()

    class Meta:
        db_table = WORKFLOW_TABLE
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(on_failure__in=ON_FAILURE), name="pgjobs_workflow_on_failure"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}#{self.id}"


class Dependency(models.Model):
    """An edge: ``child`` waits for ``parent``. ``outcome`` is the parent's terminal status,
    written once, by the statement that ended the parent (NULL: still open)."""

    pk = models.CompositePrimaryKey("parent_id", "child_id")
    parent_id = models.BigIntegerField()
    child_id = models.BigIntegerField()
    mode = models.CharField(max_length=16)
    outcome = models.CharField(max_length=32, null=True, blank=True)

    objects = QueueManager()

    class Meta:
        db_table = DEPENDENCY_TABLE
        constraints = [
            models.CheckConstraint(condition=Q(mode__in=EDGE_MODES), name="pgjobs_dependency_mode"),
        ]
        indexes = [
            models.Index(fields=["child_id"], name="pgjobs_dependency_child_idx"),
            # Open edges (the repair pass): empty once every parent has ended.
            models.Index(
                fields=["parent_id"],
                name="pgjobs_dependency_open_idx",
                condition=Q(outcome__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id} ({self.mode}: {self.outcome or 'open'})"


class Worker(models.Model):
    """A running ``runjobs`` process, upserted at every heartbeat (the admin's live workers)."""

    worker_id = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.IntegerField()
    started_at = models.DateTimeField(db_default=Now())
    last_heartbeat = models.DateTimeField(db_default=Now())
    jobs_done = models.BigIntegerField(default=0, db_default=0)
    # The worker's own --lease: its liveness is counted in it (sql/workers.py).
    lease_seconds = models.FloatField(null=True, blank=True)
    # The worst lag of its async handlers' event loop since its previous heartbeat, in seconds
    # (loopwatch.py); None: no event loop (no async handler registered).
    loop_lag_seconds = models.FloatField(null=True, blank=True)

    objects = QueueManager()

    class Meta:
        db_table = WORKER_TABLE
        ordering = ["-last_heartbeat"]

    def __str__(self) -> str:
        return self.worker_id


class Queue(models.Model):
    """Operator controls of a queue, enforced by the claim. A queue without a row is open."""

    name = models.CharField(max_length=63, primary_key=True)
    paused = models.BooleanField(default=False, db_default=False)
    concurrency_limit = models.IntegerField(
        null=True,
        blank=True,
        help_text="At most this many jobs of the queue RUNNING at once, across all workers.",
    )
    per_key_limit = models.IntegerField(
        null=True, blank=True, help_text="At most this many RUNNING jobs per flow key."
    )
    rate = models.FloatField(
        null=True, blank=True, help_text="Starts per second (one token per claimed job)."
    )
    burst = models.IntegerField(
        null=True, blank=True, help_text="Starts allowed at once above the rate (default 1)."
    )
    rate_per_key = models.BooleanField(
        null=True, blank=True, help_text="The rate applies to each flow key on its own."
    )
    updated_at = models.DateTimeField(db_default=Now())

    objects = QueueManager()

    class Meta:
        db_table = QUEUE_TABLE
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=QUEUE_NAME_DB_PATTERN), name="pgjobs_queue_name_valid"
            ),
            models.CheckConstraint(
                condition=Q(concurrency_limit__isnull=True) | Q(concurrency_limit__gte=0),
                name="pgjobs_queue_limit_gte_0",
            ),
            models.CheckConstraint(
                condition=Q(per_key_limit__isnull=True) | Q(per_key_limit__gte=1),
                name="pgjobs_queue_per_key_gte_1",
            ),
            models.CheckConstraint(
                condition=Q(rate__isnull=True) | Q(rate__gt=0), name="pgjobs_queue_rate_gt_0"
            ),
            models.CheckConstraint(
                condition=Q(burst__isnull=True) | Q(burst__gte=1), name="pgjobs_queue_burst_gte_1"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Rate(models.Model):
    """A rate limit's state (GCRA): the theoretical arrival time of the next start of a queue,
    or of one flow key of it (key ''). Written only by the claim, under the queue's lock."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=63)
    key = models.CharField(max_length=255, blank=True)
    tat = models.DateTimeField()

    objects = QueueManager()

    class Meta:
        db_table = RATE_TABLE
        constraints = [
            models.UniqueConstraint(fields=["queue", "key"], name="pgjobs_rate_queue_key"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.key}"


class Share(models.Model):
    """Fair share's state (stride scheduling): a flow key's pass in a queue, the virtual time
    its next job starts at; tenant '' holds the queue's virtual time (the pass last served),
    the floor of a returning key. Written only by the claim, under the queue's lock."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=63)
    tenant = models.CharField(max_length=255, blank=True)
    pass_value = models.FloatField(db_column="pass")

    objects = QueueManager()

    class Meta:
        db_table = SHARE_TABLE
        constraints = [
            models.UniqueConstraint(fields=["queue", "tenant"], name="pgjobs_share_queue_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.tenant}"


class Schedule(models.Model):
    """Runtime state of a cron schedule declared in settings or by decorator."""

    name = models.CharField(max_length=255, primary_key=True)
    enabled = models.BooleanField(default=True, db_default=True)
    last_fire_time = models.DateTimeField(null=True, blank=True)
    last_job_id = models.BigIntegerField(null=True, blank=True)
    next_fire_time = models.DateTimeField(null=True, blank=True)
    run_now_requested = models.BooleanField(default=False, db_default=False)
    updated_at = models.DateTimeField(db_default=Now())

    objects = QueueManager()

    class Meta:
        db_table = SCHEDULE_TABLE
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ScheduleFire(models.Model):
    """One row per (schedule, fire time): the unique constraint makes each tick fire once,
    however many workers run the scheduler."""

    schedule = models.CharField(max_length=255)
    fire_time = models.DateTimeField()
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    objects = QueueManager()

    class Meta:
        db_table = SCHEDULE_FIRE_TABLE
        ordering = ["-fire_time"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "fire_time"], name="pgjobs_schedule_fire_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule}@{self.fire_time.isoformat()}"


# --- observability: rollups the dashboard reads (written by rollup.py) -------------------------


class JobStatMinute(models.Model):
    """What workers finished, per minute x queue x type. Each worker adds its in-memory counts
    with one upsert per flush; the rows outlive the pruning of the jobs they count."""

    minute = models.DateTimeField()
    queue = models.CharField(max_length=63)
    type = models.CharField(max_length=255)
    completed = models.BigIntegerField(default=0, db_default=0)
    failed = models.BigIntegerField(default=0, db_default=0)
    retried = models.BigIntegerField(default=0, db_default=0)
    duration_sum_ms = models.BigIntegerField(default=0, db_default=0)
    # Runs per log-scale duration bucket (a JSON list of counts, index = rollup.bucket_of(ms)):
    # percentiles without the raw rows.
    duration_hist = models.JSONField(default=list, db_default=[], blank=True)

    objects = QueueManager()

    class Meta:
        db_table = STAT_MINUTE_TABLE
        ordering = ["-minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "queue", "type"], name="pgjobs_stat_minute_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.queue}/{self.type}"


class QueueDepthSample(models.Model):
    """Queue depth once a minute (one worker samples for the whole cluster)."""

    sampled_at = models.DateTimeField()
    queue = models.CharField(max_length=63)
    due = models.BigIntegerField(help_text="PENDING jobs whose run_after has passed.")
    scheduled = models.BigIntegerField(help_text="PENDING jobs due later.")
    running = models.BigIntegerField()
    oldest_due_age_s = models.FloatField(null=True, blank=True)

    objects = QueueManager()

    class Meta:
        db_table = DEPTH_SAMPLE_TABLE
        ordering = ["-sampled_at"]
        constraints = [
            models.UniqueConstraint(fields=["sampled_at", "queue"], name="pgjobs_depth_sample_key"),
        ]

    def __str__(self) -> str:
        return f"{self.sampled_at:%Y-%m-%d %H:%M} {self.queue}"


class Dashboard(Job):
    """No table: gives the admin a /admin/django_pgjobs/dashboard/ page and its permission."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
        default_permissions = ("view",)
