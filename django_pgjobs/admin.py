"""The jobs admin: an operations view of the queue. Thin: it reads rows, and every change goes
through the operator API of operations.py (retry_now, run_now, cancel, duplicate,
delete_finished), each action behind its own permission and recorded (admin_audit.py).

Built to stay fast on millions of rows: no full COUNT(*) per page (a capped count, then the
planner's estimate), the JSON columns deferred in the list, only indexed orderings, filters whose
choices come from indexes or the rollup, and a search that only uses indexed conditions.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from functools import cached_property
from typing import Any

import django
from django.contrib import admin, messages

try:
    from django.contrib.admin.options import ActionLocation  # Django >= 6.1
except ImportError:
    ActionLocation = None  # type: ignore[misc,assignment]
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.functions import Left, Now, Right
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from . import (
    admin_audit,
    admin_counts,
    admin_detail,
    admin_workflow,
    conf,
    dashboard,
    operations,
    registry,
    waits,
)
from .admin_format import (  # noqa: F401 - redact, error_summary: importable from here too
    breakable,
    derived_status,
    error_line,
    error_summary,
    human_ms,
    pretty_json,
    progress_bar,
    redact,
    relative,
    short_type,
    span,
    status_badge,
    took_ms,
    when,
)
from .models import Dashboard, Job, Workflow
from .sql import queues, rollups
from .status import TERMINAL_STATUSES, JobStatus
from .tables import JOB_TABLE

_CHANGE_LIST = getattr(ActionLocation, "CHANGE_LIST", None)  # get_actions' default location
RUNNING_PAGE_REFRESH = 5  # seconds: a running job's page reloads itself
ACTION_LIMIT = 10_000  # jobs one action may touch (select-across on a huge table is refused)
EXACT_COUNT_UP_TO = 10_000  # the changelist counts exactly up to this, then estimates

# --- fast counting -----------------------------------------------------------------------------


class EstimatedCountPaginator(Paginator):
    """Counts exactly up to EXACT_COUNT_UP_TO rows, then trusts the planner's estimate."""

    @cached_property
    def count(self) -> int:
        qs: Any = self.object_list  # a QuerySet here
        exact = qs.order_by()[: EXACT_COUNT_UP_TO + 1].count()
        if exact <= EXACT_COUNT_UP_TO:
            return exact
        try:
            plan = json.loads(qs.order_by().explain(format="json"))
            estimate = int(plan[0]["Plan"]["Plan Rows"])
        except (ValueError, KeyError, IndexError, TypeError):
            estimate = 0
        return max(exact, estimate)


def distinct_types(using: str | None = None, limit: int = 200) -> list[str]:
    """Job types in the table, by a loose index scan of the (type, tenant, created) index."""
    with connections[using or conf.get("DATABASE")].cursor() as cur:
        cur.execute(
            f"""WITH RECURSIVE t(type) AS (
                    (SELECT type FROM {JOB_TABLE} ORDER BY type LIMIT 1)
                    UNION ALL
                    SELECT (SELECT j.type FROM {JOB_TABLE} j WHERE j.type > t.type
                            ORDER BY j.type LIMIT 1)
                    FROM t WHERE t.type IS NOT NULL
                )
                SELECT type FROM t WHERE type IS NOT NULL LIMIT %s""",
            [limit],
        )
        return [r[0] for r in cur.fetchall()]


def known_types() -> list[str]:
    return sorted(set(distinct_types()) | set(registry.registered_types()))


def known_queues() -> list[str]:
    names = set(rollups.known_queues(days=1))
    names.add(conf.get("DEFAULT_QUEUE"))
    for t in registry.registered_types():
        spec = registry.get(t)
        if spec is not None:
            names.add(spec.effective_queue())
    names.update(queues.queue_names())
    names.update(recent_values("queue"))
    return sorted(names)


def recent_values(column: str, limit: int = 30) -> list[str]:
    """Distinct values of a column among the 5,000 newest jobs (cheap: the primary key)."""
    if column not in ("queue", "tenant_id"):
        raise ValueError(column)
    with connections[conf.get("DATABASE")].cursor() as cur:
        cur.execute(
            f"""SELECT DISTINCT {column} FROM (
                    SELECT {column} FROM {JOB_TABLE} ORDER BY id DESC LIMIT 5000) r
                WHERE {column} IS NOT NULL ORDER BY 1 LIMIT %s""",
            [limit],
        )
        return [r[0] for r in cur.fetchall()]


# --- filters ------------------------------------------------------------------------------------


class StateFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "state"
    DERIVED = {
        "due": Q(status=JobStatus.PENDING, run_after__lte=Now()),
        "scheduled": Q(status=JobStatus.PENDING, run_after__gt=Now()),
        "retrying": Q(status=JobStatus.PENDING, attempts__gt=0),
        "stale": Q(status=JobStatus.RUNNING, lease_expires_at__lt=Now()),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("WAITING", "Waiting (workflow step)"),
            ("PENDING", "Pending (all)"),
            ("due", "Pending, due now"),
            ("scheduled", "Scheduled (due later)"),
            ("retrying", "Retrying (attempts > 0)"),
            ("RUNNING", "Running"),
            ("stale", "Stale (lease expired)"),
            ("COMPLETED", "Completed"),
            ("COMPLETED_WITH_ERRORS", "Completed with errors"),
            ("FAILED", "Failed"),
            ("CANCELLED", "Cancelled"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value in self.DERIVED:
            return queryset.filter(self.DERIVED[value])
        if value in JobStatus.values:
            return queryset.filter(status=value)
        return queryset


class _ValueFilter(admin.SimpleListFilter):
    """A filter on one column whose choices are computed; any value in the URL is honoured."""

    field = ""

    def choices_list(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = self.choices_list()
        if (chosen := self.value()) and chosen not in values:
            values = [chosen, *values]
        return [(v, v) for v in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value():
            return queryset.filter(**{self.field: self.value()})
        return queryset


class QueueFilter(_ValueFilter):
    title = "queue"
    parameter_name = "queue"
    field = "queue"

    def choices_list(self) -> list[str]:
        return known_queues()


class TypeFilter(_ValueFilter):
    title = "type"
    parameter_name = "type"
    field = "type"

    def choices_list(self) -> list[str]:
        return known_types()


class TenantFilter(_ValueFilter):
    title = "tenant"
    parameter_name = "tenant"
    field = "tenant_id"

    def choices_list(self) -> list[str]:
        """Tenants of the most recent jobs (the URL accepts any tenant)."""
        return recent_values("tenant_id")


class WorkflowFilter(admin.SimpleListFilter):
    """The jobs of one workflow (``?workflow=<id>``); shown only while in use."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = self.value()
        return [(chosen, f"#{chosen}")] if chosen and chosen.isdigit() else []

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        chosen = self.value()
        if chosen and chosen.isdigit():
            return queryset.filter(workflow_id=int(chosen))
        return queryset


class FinishedWithinFilter(admin.SimpleListFilter):
    title = "finished within"
    parameter_name = "finished"
    WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("1h", "Last hour"), ("24h", "Last 24 hours"), ("7d", "Last 7 days")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        window = self.WINDOWS.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(finished_at__gte=Now() - window)


class HasErrorFilter(admin.SimpleListFilter):
    title = "has error"
    parameter_name = "has_error"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(error__isnull=False)
        if self.value() == "no":
            return queryset.filter(error__isnull=True)
        return queryset


# --- the job admin ------------------------------------------------------------------------------

_TRACE_TERM = re.compile(r"^[A-Za-z0-9._:\-]{4,255}$")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    # Fits 1440 px with the admin's sidebar and the filters open (tests/browser checks it);
    # tenant, worker, trace id and priority are on the job page and in the filters.
    # The queue under the type and the duration under the end time: two short lines per row
    # leave the details (error, progress) the room.
    list_display = ("id", "type_col", "status_col", "attempts_col", "when_col", "detail_col")
    list_display_links = ("id",)
    list_filter = (
        StateFilter,
        QueueFilter,
        TypeFilter,
        FinishedWithinFilter,
        HasErrorFilter,
        TenantFilter,
        WorkflowFilter,
    )
    search_fields = ("=id",)  # shows the box; get_search_results does the indexed search
    search_help_text = "Job id, trace id (or its first characters), or job type (or its beginning)."
    sortable_by = ("id",)  # other orderings would sort millions of rows
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 50
    list_max_show_all = 200
    actions = [
        "retry_jobs",
        "run_jobs_now",
        "cancel_jobs",
        "duplicate_jobs",
        "delete_finished_jobs",
    ]
    change_list_template = "admin/django_pgjobs/job/change_list.html"
    change_form_template = "admin/django_pgjobs/job/change_form.html"
    fieldsets = (
        (None, {"fields": ("overview",)}),
        ("Timeline", {"fields": ("timeline",)}),
        ("Config", {"fields": ("config_pretty",)}),
        ("Result", {"fields": ("result_pretty",)}),
        ("Error", {"fields": ("error_pretty",)}),
        ("Attempts", {"fields": ("history_table",)}),
    )
    readonly_fields = (
        "overview",
        "timeline",
        "config_pretty",
        "result_pretty",
        "error_pretty",
        "item_errors_table",
        "history_table",
    )

    # --- permissions: jobs are enqueued by code and changed only through actions ---------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the detail page is read-only: config, type, status never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.status not in TERMINAL_STATUSES:
            return False
        return super().has_delete_permission(request, obj)

    def _perm(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"django_pgjobs.{codename}")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return self._perm(request, "retry_job")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return self._perm(request, "run_job_now")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self._perm(request, "cancel_job")

    def has_duplicate_permission(self, request: HttpRequest) -> bool:
        return self._perm(request, "duplicate_job")

    if ActionLocation is not None:  # Django >= 6.1: actions on the change form too

        def get_actions(
            self,
            request: HttpRequest,
            action_location: Any = _CHANGE_LIST,
        ) -> dict[str, Any]:
            actions = super().get_actions(request, action_location=action_location)
            actions.pop("delete_selected", None)  # any state: replaced by delete_finished
            return actions
    else:

        def get_actions(self, request: HttpRequest) -> dict[str, Any]:  # type: ignore[misc]
            actions = super().get_actions(request)
            actions.pop("delete_selected", None)
            return actions

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        if not operations.delete_finished(obj.pk):
            raise PermissionDenied("only finished jobs can be deleted")

    # --- list ----------------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = super().get_queryset(request)
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == "django_pgjobs_job_changelist":
            qs = qs.defer("config", "result", "history", "error").annotate(
                error_head=Left("error", 400), error_tail=Right("error", 2000)
            )
        return qs

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        q = Q()
        if term.isdigit() and len(term) < 19:
            q |= Q(id=int(term))
        if _TRACE_TERM.match(term):
            q |= Q(trace_id__startswith=term)
            if term != term.lower():
                q |= Q(trace_id__startswith=term.lower())
        types = [t for t in known_types() if t.startswith(term)]
        if types:
            q |= Q(type__in=types)
        if not q:
            return queryset.none(), False
        return queryset.filter(q), False

    @admin.display(description="type")
    def type_col(self, obj: Job) -> SafeString:
        """Cut in the middle when long, so two types that differ at the end stay apart; the
        queue under it."""
        return format_html(
            '<a href="{}" title="{}">{}</a><span class="pgjobs-sub">{}</span>',
            reverse("admin:django_pgjobs_job_change", args=[obj.pk]),
            obj.type,
            short_type(obj.type),
            obj.queue,
        )

    @admin.display(description="status")
    def status_col(self, obj: Job) -> SafeString:
        return status_badge(obj)

    def get_list_display(self, request: HttpRequest) -> Any:
        """On a view of one finished state the status column says nothing: its room goes to
        the error."""
        if request.GET.get("state") in TERMINAL_STATUSES:
            return tuple(c for c in self.list_display if c != "status_col")
        return self.list_display

    @admin.display(description="tries")
    def attempts_col(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description="when")
    def when_col(self, obj: Job) -> SafeString:
        """The time that matters in the job's state: due, started or finished."""
        now = timezone.now()
        if obj.status == JobStatus.RUNNING and obj.started_at:
            return format_html("started {}", relative(obj.started_at, now))
        if obj.status == JobStatus.PENDING:
            wait = getattr(obj, "pgjobs_wait", "")  # waits.annotate, in get_changelist_instance
            return format_html(
                "due {}{}",
                relative(obj.run_after, now),
                format_html('<span class="pgjobs-wait">{}</span>', wait) if wait else "",
            )
        if obj.finished_at:
            took = (
                format_html('<span class="pgjobs-sub">took {}</span>', took_ms(obj.duration_ms))
                if obj.duration_ms is not None
                else ""
            )
            return format_html("ended {}{}", relative(obj.finished_at, now), took)
        return format_html("created {}", relative(obj.created_at, now))

    @admin.display(description="details")
    def detail_col(self, obj: Job) -> SafeString | str:
        bar = progress_bar(obj) if obj.status == JobStatus.RUNNING else ""
        return bar or self.error_col(obj)

    @admin.display(description="trace id")
    def trace_col(self, obj: Job) -> SafeString | str:
        if not obj.trace_id:
            return "–"
        url = reverse("admin:django_pgjobs_job_changelist") + "?q=" + obj.trace_id
        return format_html(
            '<a href="{}" title="{}"><code>{}</code></a>',
            url,
            obj.trace_id,
            obj.trace_id[:12] + ("…" if len(obj.trace_id) > 12 else ""),
        )

    @admin.display(description="last error")
    def error_col(self, obj: Job) -> SafeString | str:
        head = getattr(obj, "error_head", None)
        if head is None:
            return "–"
        tail = getattr(obj, "error_tail", "") or ""
        return error_line(tail if "Traceback" in tail else head) or error_line(head) or "–"

    # --- detail --------------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The error first when the job failed or has item errors."""
        if obj is None:
            return super().get_fieldsets(request, obj)
        main: list[Any] = [(None, {"fields": ("overview",)})]
        problems: list[Any] = []
        if obj.error and obj.status != JobStatus.COMPLETED:
            problems.append(("Error", {"fields": ("error_pretty",)}))
        if admin_detail.item_errors(obj):
            problems.append(("Item errors", {"fields": ("item_errors_table",)}))
        rest = [
            ("Timeline", {"fields": ("timeline",)}),
            ("Config", {"fields": ("config_pretty",)}),
            ("Result", {"fields": ("result_pretty",)}),
            ("Attempts", {"fields": ("history_table",)}),
        ]
        failed = obj.status in (JobStatus.FAILED, JobStatus.COMPLETED_WITH_ERRORS)
        return problems + main + rest if failed else main + rest + problems

    @admin.display(description="Job")
    def overview(self, obj: Job) -> SafeString:
        now = timezone.now()
        running = obj.status == JobStatus.RUNNING and obj.started_at
        rows = [
            ("status", status_badge(obj)),
            ("type", breakable(obj.type)),
            ("queue", breakable(obj.queue)),
            ("priority", obj.priority),
            ("attempts", f"{obj.attempts}/{obj.max_attempts}"),
            ("enqueued", when(obj.created_at)),
            ("due" if obj.status == JobStatus.PENDING else "last due", when(obj.run_after)),
            ("started", when(obj.started_at)),
            ("finished", when(obj.finished_at)),
            (
                "elapsed" if running else "duration",
                span((now - obj.started_at).total_seconds())
                if running and obj.started_at
                else human_ms(obj.duration_ms),
            ),
            ("progress", admin_detail.progress_cell(obj, now)),
            ("tenant", obj.tenant_id or "–"),
            ("operated by", obj.operated_by or "–"),
            ("trace id", self.trace_col(obj)),
            ("unique key", obj.unique_key or "–"),
            ("worker", breakable(obj.locked_by) if obj.locked_by else "–"),
            ("lease expires", relative(obj.lease_expires_at, now) if obj.lease_expires_at else "–"),
            ("cancel requested", "yes" if obj.cancel_requested else "no"),
        ]
        rows[1:1] = self._state_rows(obj, now)
        if obj.workflow_id is not None:
            rows.insert(1, ("workflow", self._workflow_link(obj, obj.workflow_id)))
        return format_html(
            '<table class="pgjobs-kv">{}</table>',
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
        )

    def _state_rows(self, obj: Job, now: Any) -> list[tuple[str, str]]:
        """What the status alone does not say: a cancel request a running job has not yet
        acted on, or why a pending job waits (waits.py)."""
        if obj.status == JobStatus.RUNNING and obj.cancel_requested:
            return [
                ("state", "cancel requested: it stops when its handler checks job.cancel_requested")
            ]
        if obj.status == JobStatus.PENDING:
            wait = waits.reason(obj, waits.queue_states([obj.queue]).get(obj.queue), now)
            return [("waiting", wait)] if wait else []
        return []

    def _workflow_link(self, obj: Job, workflow_id: int) -> SafeString:
        """The job's workflow (its page) and step; what it still waits for while WAITING."""
        name = Workflow.objects.filter(pk=workflow_id).values_list("name", flat=True).first()
        waits_for = (
            f" · waits for {obj.deps_open} dependenc{'y' if obj.deps_open == 1 else 'ies'}"
            if obj.status == JobStatus.WAITING and obj.deps_open
            else ""
        )
        return format_html(
            '<a href="{}" id="pgjobs-workflow-link">{} #{}</a> · step {}{}',
            reverse("admin:django_pgjobs_workflow", args=[workflow_id]),
            name if name is not None else "workflow",
            workflow_id,
            breakable(obj.step or "–"),
            waits_for,
        )

    @admin.display(description="Config (secrets redacted)")
    def config_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.config)

    @admin.display(description="Result (secrets redacted)")
    def result_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.result)

    @admin.display(description="Error")
    def error_pretty(self, obj: Job) -> SafeString | str:
        if not obj.error:
            return "–"
        if "\n" not in obj.error.strip():  # one line: the line itself, once
            return format_html('<p class="pgjobs-err">{}</p>', obj.error)
        cls, line = error_summary(obj.error)
        return format_html(
            '<p class="pgjobs-err"><b>{}</b>{}{}</p><pre class="pgjobs-pre">{}</pre>',
            cls,
            ": " if cls else "",
            line,
            obj.error,
        )

    @admin.display(description="Item errors (secrets redacted)")
    def item_errors_table(self, obj: Job) -> SafeString | str:
        return admin_detail.item_errors_table(obj)

    @admin.display(description="Per attempt")
    def history_table(self, obj: Job) -> SafeString | str:
        return admin_detail.attempts_table(obj)

    @admin.display(description="Timeline")
    def timeline(self, obj: Job) -> SafeString:
        return admin_detail.timeline(obj)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's jobs, each told why it waits (one query for all their queues)."""
        cl = super().get_changelist_instance(request)
        waits.annotate(list(cl.result_list))
        return cl

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        extra["pgjobs_tabs"] = self._tabs(request)
        chosen = request.GET.get("workflow", "")
        if chosen.isdigit():
            extra["pgjobs_workflow_url"] = reverse("admin:django_pgjobs_workflow", args=[chosen])
        return super().changelist_view(request, extra)

    # --- a workflow's page (its steps and their graph; admin_workflow.py) -----------------------

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path(
                "workflow/<int:workflow_id>/",
                view(self.workflow_view),
                name="django_pgjobs_workflow",
            ),
            *super().get_urls(),
        ]

    def workflow_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        wf = Workflow.objects.filter(pk=workflow_id).first()
        if wf is None:
            raise Http404(f"no workflow #{workflow_id}")
        data = admin_workflow.page(wf)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Workflow {wf.name} #{wf.pk}",
            "opts": self.model._meta,
            "page": data,
            "ol_breadcrumbs": django.VERSION >= (6, 0),
            "changelist_url": reverse("admin:django_pgjobs_job_changelist"),
            "refresh": RUNNING_PAGE_REFRESH if data["state"] == "running" else 0,
        }
        return TemplateResponse(request, "admin/django_pgjobs/workflow.html", context)

    def _tabs(self, request: HttpRequest) -> list[dict[str, Any]]:
        """State tabs: the list's other filters kept, counts over the whole table."""
        current = request.GET.get("state", "")
        params = request.GET.copy()
        params.pop("p", None)
        params.pop("state", None)
        tabs = [
            {
                "label": "All",
                "url": "?" + params.urlencode(),
                "count": "",
                "active": not current,
                "title": "every state",
            }
        ]
        for tab in admin_counts.state_tabs():
            params["state"] = tab.state
            tabs.append(
                {
                    "label": tab.label,
                    "url": "?" + params.urlencode(),
                    "count": tab.shown,
                    "active": current == tab.state,
                    "title": (
                        "estimated from the table's statistics" if tab.estimated else "exact count"
                    )
                    + ", all queues and types",
                }
            )
        return tabs

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        job = (
            Job.objects.filter(pk=object_id).only("status", "run_after", "cancel_requested").first()
            if str(object_id).isdigit()
            else None
        )
        if job is not None:
            extra["pgjobs_actions"] = self._detail_actions(request, job)
            extra["pgjobs_refresh"] = RUNNING_PAGE_REFRESH if job.status == JobStatus.RUNNING else 0
            extra["pgjobs_changelist_url"] = reverse("admin:django_pgjobs_job_changelist")
        return super().change_view(request, object_id, form_url, extra)

    def _detail_actions(self, request: HttpRequest, job: Job) -> list[tuple[str, str]]:
        allowed = self.get_actions(request)
        applies = {
            "retry_jobs": job.status in ("FAILED", "COMPLETED_WITH_ERRORS", "CANCELLED"),
            "run_jobs_now": job.status == JobStatus.PENDING and job.run_after > timezone.now(),
            "cancel_jobs": job.status == JobStatus.PENDING
            or (job.status == JobStatus.RUNNING and not job.cancel_requested),
            "duplicate_jobs": True,
            "delete_finished_jobs": job.status in TERMINAL_STATUSES,
        }
        return [
            (name, _description(allowed[name]))
            for name in self.actions
            if name in allowed and applies.get(name)
        ]

    # --- actions: each calls operations.py and reports "n done, m skipped (reason)" ---------------

    def _ids(self, request: HttpRequest, queryset: QuerySet) -> list[int] | None:
        ids = list(queryset.order_by().values_list("id", flat=True)[: ACTION_LIMIT + 1])
        if len(ids) > ACTION_LIMIT:
            self.message_user(
                request,
                f"Nothing done: at most {ACTION_LIMIT:,} jobs per action; "
                "narrow the selection with the filters.",
                messages.ERROR,
            )
            return None
        return ids

    def _report(
        self,
        request: HttpRequest,
        verb: str,
        ids: list[int],
        done: Iterable[int],
        reason: str,
        extra: str = "",
    ) -> HttpResponse | None:
        done = set(done)
        skipped = [i for i in ids if i not in done]
        text = f"{verb}: {len(done)} done{extra}"
        if skipped:
            by_status = Counter(Job.objects.filter(id__in=skipped).values_list("status", flat=True))
            parts = [f"{n} {s.lower()}" for s, n in sorted(by_status.items())]
            gone = len(skipped) - sum(by_status.values())
            if gone:
                parts.append(f"{gone} no longer exist")
            text += f", {len(skipped)} skipped ({', '.join(parts)}: {reason})"
        self.message_user(request, text, messages.SUCCESS if done else messages.WARNING)
        return self._back_to_detail(request, ids)

    def _back_to_detail(self, request: HttpRequest, ids: list[int]) -> HttpResponse | None:
        if request.POST.get("_pgjobs_next") == "detail" and len(ids) == 1:
            if Job.objects.filter(pk=ids[0]).exists():
                return HttpResponseRedirect(
                    reverse("admin:django_pgjobs_job_change", args=[ids[0]])
                )
        return None

    @admin.action(
        permissions=["retry"], description="Retry now (failed / cancelled / completed with errors)"
    )
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        ids = self._ids(request, queryset)
        if ids is None:
            return None
        done = operations.retry_now(ids)
        admin_audit.record(request, "retry", done)
        return self._report(
            request,
            "Retry",
            ids,
            done,
            "only failed, cancelled or completed-with-errors jobs are retried",
        )

    @admin.action(permissions=["run_now"], description="Run now (scheduled / retrying)")
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        ids = self._ids(request, queryset)
        if ids is None:
            return None
        done = operations.run_now(ids)
        admin_audit.record(request, "run_now", done)
        why = waits.held_text([i for i in ids if i not in set(done)])
        still = waits.held_text(done)
        return self._report(
            request,
            "Run now",
            ids,
            done,
            "only pending jobs due later can be made due now"
            + (f"; the due ones wait because: {why}" if why else ""),
            f" (due now, but still held: {still})" if still else "",
        )

    @admin.action(permissions=["cancel"], description="Cancel (pending; running: request)")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        ids = self._ids(request, queryset)
        if ids is None:
            return None
        cancelled, requested = operations.cancel(ids)
        admin_audit.record(request, "cancel", cancelled)
        admin_audit.record(request, "cancel_requested", requested)
        extra = (
            (
                f" ({len(cancelled)} cancelled, {len(requested)} running: cancel requested, "
                "the handler sees job.cancel_requested)"
            )
            if requested
            else ""
        )
        return self._report(
            request,
            "Cancel",
            ids,
            [*cancelled, *requested],
            "already finished, or cancel already requested",
            extra,
        )

    @admin.action(permissions=["duplicate"], description="Duplicate as new jobs")
    def duplicate_jobs(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        ids = self._ids(request, queryset)
        if ids is None:
            return None
        pairs = operations.duplicate(ids, operated_by=f"admin:{request.user.get_username()}")
        admin_audit.record(request, "duplicate", [src for src, _ in pairs], copies=dict(pairs))
        response = self._report(
            request,
            "Duplicate",
            ids,
            [src for src, _ in pairs],
            "job type not registered in this process",
        )
        if request.POST.get("_pgjobs_next") == "detail" and len(pairs) == 1:
            return HttpResponseRedirect(
                reverse("admin:django_pgjobs_job_change", args=[pairs[0][1]])
            )
        return response

    @admin.action(permissions=["delete"], description="Delete (finished jobs only)")
    def delete_finished_jobs(
        self,
        request: HttpRequest,
        queryset: QuerySet,
    ) -> HttpResponse | None:
        ids = self._ids(request, queryset)
        if ids is None:
            return None
        if request.POST.get("post") != "yes":  # first ask, as Django's own delete action does
            return self._confirm_delete(request, ids)
        names = admin_audit.reprs(ids)
        done = operations.delete_finished(ids)
        admin_audit.record(request, "delete", done, names)
        self._report(
            request,
            "Delete",
            ids,
            done,
            "pending or running jobs are not deleted: cancel them first",
        )
        return None

    def _confirm_delete(self, request: HttpRequest, ids: list[int]) -> HttpResponse:
        jobs = list(
            Job.objects.using(conf.get("DATABASE"))
            .filter(id__in=ids)
            .only("id", "type", "status", "queue", "finished_at")
            .order_by("-id")[:200]
        )
        deletable = [j for j in jobs if j.status in TERMINAL_STATUSES]
        context = {
            **self.admin_site.each_context(request),
            "title": "Are you sure?",
            "opts": self.model._meta,
            "ids": ids,
            "deletable": deletable,
            "kept": [j for j in jobs if j.status not in TERMINAL_STATUSES],
            "shown_all": len(ids) <= 200,
            "total": len(ids),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "ol_breadcrumbs": django.VERSION >= (6, 0),
            # the list's filters (this POST came from the filtered list): kept after Yes and No
            "changelist_url": reverse("admin:django_pgjobs_job_changelist")
            + ("?" + request.GET.urlencode() if request.GET else ""),
        }
        return TemplateResponse(
            request, "admin/django_pgjobs/job/delete_confirmation.html", context
        )


# --- the dashboard (a proxy model gives it its admin URL, index link and permission) -----------


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_pgjobs.view_dashboard") or request.user.has_perm(
            "django_pgjobs.view_job"
        )

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.dashboard_view), name="django_pgjobs_dashboard_changelist"),
            path("json/", view(self.dashboard_json), name="django_pgjobs_dashboard_json"),
        ]

    def _data(self, request: HttpRequest) -> dict[str, Any]:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return dashboard.build(
            dashboard.clamp_hours(request.GET.get("hours")), types=distinct_types()
        )

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        data = self._data(request)
        context = {
            **self.admin_site.each_context(request),
            "title": "Jobs dashboard",
            "opts": self.model._meta,
            "data": data,
            "charts": dashboard.charts_for(data),
            **dashboard.rows_for(data),
            "queues_url": reverse("admin:django_pgjobs_queue_changelist"),
            "hours_choices": (1, 3, 6, 12, 24, 48),
            "refresh_choices": (0, 5, 15, 60),
            "refresh": dashboard.clamp_refresh(request.GET.get("refresh")),
            "ol_breadcrumbs": django.VERSION >= (6, 0),  # 5.2 writes a div with &rsaquo;
            "changelist_url": reverse("admin:django_pgjobs_job_changelist"),
            "json_url": reverse("admin:django_pgjobs_dashboard_json"),
        }
        return TemplateResponse(request, "admin/django_pgjobs/dashboard.html", context)

    def dashboard_json(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse(self._data(request), json_dumps_params={"indent": 2})


from . import admin_controls  # noqa: E402,F401 - cron schedules and queue controls (their admin)


def _description(action: Any) -> str:
    """An action's label: Django 6.1 gives Action objects, 5.2 (func, name, description)."""
    return str(action.description if hasattr(action, "description") else action[2])
