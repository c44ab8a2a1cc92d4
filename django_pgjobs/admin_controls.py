"""Admin for cron schedules and queue controls. Thin: every write goes through sql/schedules.py or
sql/queues.py; each action needs the model's change permission."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from . import conf, flow, scheduler
from .admin_format import cron_line, in_zone, when
from .models import Queue, Schedule
from .oplog import record as log_action
from .sql import queues, rollups, schedules

_specs_cache: list[Any] = [None, -1, {}]  # [settings dict, decorator count, specs by name]


def _specs() -> dict[str, scheduler.ScheduleSpec]:
    """Valid definitions, re-read when the PGJOBS setting changes (its dict is rebuilt)."""
    current, decorated = conf.get_settings(), len(scheduler._decorated)  # noqa: SLF001
    if _specs_cache[0] is not current or _specs_cache[1] != decorated:
        _specs_cache[:] = [current, decorated, {s.name: s for s in scheduler.load()[0]}]
    return _specs_cache[2]


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "job_type",
        "cron",
        "enabled",
        "last_fire",
        "last_job",
        "next_run",
        "run_now_col",
    )
    list_filter = ("enabled",)
    search_fields = ("name",)
    readonly_fields = (
        "name",
        "job_type",
        "cron",
        "enabled",
        "last_fire",
        "last_job",
        "next_run",
        "run_now_requested",
        "updated",
    )
    fields = readonly_fields
    actions = ("enable", "disable", "run_now")
    change_list_template = "admin/django_pgjobs/schedule/change_list.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # schedules are declared in PGJOBS['SCHEDULES'] or with @schedule

    @admin.display(description="job type")
    def job_type(self, obj: Schedule) -> str:
        spec = _specs().get(obj.name)
        return spec.type if spec else "(no longer defined)"

    @admin.display(description="cron")
    def cron(self, obj: Schedule) -> str:
        spec = _specs().get(obj.name)
        if spec is None:
            return "–"
        return cron_line(spec.cron, spec.timezone, spec.catch_up)

    @admin.display(description="next run")
    def next_run(self, obj: Schedule) -> Any:
        if not obj.enabled:
            return "disabled"
        spec = _specs().get(obj.name)
        if not obj.next_fire_time:
            return "at the next scheduler pass"
        return in_zone(obj.next_fire_time, spec.timezone if spec else "UTC")

    @admin.display(description="run now?")
    def run_now_col(self, obj: Schedule) -> str:
        return "requested" if obj.run_now_requested else "–"  # not a red ✖: nothing asked

    @admin.display(description="last fire")
    def last_fire(self, obj: Schedule) -> Any:
        return when(obj.last_fire_time)

    @admin.display(description="updated")
    def updated(self, obj: Schedule) -> Any:
        return when(obj.updated_at)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The page is read-only (no Save buttons); the actions need the change permission."""
        return obj is None and super().has_change_permission(request, obj)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        return super().change_view(
            request,
            object_id,
            form_url,
            {
                **(extra_context or {}),
                "show_save": False,
                "show_save_and_continue": False,
                "show_save_and_add_another": False,
                "show_delete": False,
            },
        )

    @admin.display(description="last job")
    def last_job(self, obj: Schedule) -> Any:
        if obj.last_job_id is None:
            return "–"
        try:
            url = reverse("admin:django_pgjobs_job_change", args=[obj.last_job_id])
        except NoReverseMatch:
            return f"#{obj.last_job_id}"
        return format_html('<a href="{}">#{}</a>', url, obj.last_job_id)

    @admin.action(
        description="Enable selected schedules (from their next tick)", permissions=["change"]
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        n = schedules.set_enabled(_names(queryset), True)
        log_action(
            request.user.pk, Schedule, _names(queryset), "Enabled (fires from its next tick)"
        )
        self.message_user(
            request,
            f"{n} schedule(s) enabled: they fire from their next tick; "
            "ticks missed while disabled do not fire.",
            messages.SUCCESS,
        )

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        n = schedules.set_enabled(_names(queryset), False)
        log_action(request.user.pk, Schedule, _names(queryset), "Disabled")
        self.message_user(request, f"{n} schedule(s) disabled.", messages.SUCCESS)

    @admin.action(description="Run selected schedules now (once)", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        defined = _specs()
        names = [n for n in _names(queryset) if n in defined]
        unknown = sorted(set(_names(queryset)) - set(names))
        if unknown:
            self.message_user(
                request, f"not defined any more, not run: {', '.join(unknown)}", messages.WARNING
            )
        if names:
            n = schedules.request_run_now(names)
            log_action(
                request.user.pk,
                Schedule,
                names,
                "Run now requested (fires once at the next scheduler pass)",
            )
            self.message_user(
                request,
                f"{n} schedule(s) will fire once at the next scheduler pass (within "
                f"{conf.get('SCHEDULER_INTERVAL'):g} s of a running worker).",
                messages.SUCCESS,
            )


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ("name", "paused", "concurrency_limit", "per_key_limit", "rate", "updated")
    list_editable = ("paused", "concurrency_limit")
    search_fields = ("name",)
    fields = (
        "name",
        "paused",
        "concurrency_limit",
        "per_key_limit",
        "rate",
        "burst",
        "rate_per_key",
        "updated_at",
    )
    readonly_fields = ("updated_at",)
    actions = ("pause", "resume")
    change_list_template = "admin/django_pgjobs/queue/change_list.html"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        """Every queue that has jobs, not only those with a control row."""
        return super().changelist_view(
            request,
            {
                **(extra_context or {}),
                "pgjobs_queues": queue_rows(),
                "can_add_controls": self.has_add_permission(request),
            },
        )

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Queue) -> Any:
        return when(obj.updated_at)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"name": request.GET.get("name", "")}  # "set controls" of a queue without a row

    def get_readonly_fields(self, request: HttpRequest, obj: Queue | None = None) -> Any:
        return ("name", "updated_at") if obj is not None else ("updated_at",)

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        queues.set_queue_paused(obj.name, obj.paused)
        queues.set_queue_limit(obj.name, obj.concurrency_limit)
        if "per_key_limit" in form.changed_data or not change:
            queues.set_queue_per_key(obj.name, obj.per_key_limit)
        if {"rate", "burst", "rate_per_key"} & set(form.changed_data) or not change:
            queues.set_queue_rate(obj.name, obj.rate, obj.burst, obj.rate_per_key)

    @admin.action(description="Pause selected queues (running jobs finish)", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for name in _names(queryset):
            queues.set_queue_paused(name, True)
        log_action(request.user.pk, Queue, _names(queryset), "Paused (running jobs finish)")
        self.message_user(request, f"paused: {', '.join(_names(queryset))}", messages.SUCCESS)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for name in _names(queryset):
            queues.set_queue_paused(name, False)
        log_action(request.user.pk, Queue, _names(queryset), "Resumed")
        self.message_user(request, f"resumed: {', '.join(_names(queryset))}", messages.SUCCESS)


def queue_rows() -> list[dict[str, Any]]:
    """Controls and live counts of every queue with a control row, active jobs, or jobs that
    finished in the last day; held_back: due jobs the pause or the limit keeps waiting."""
    from .dashboard_queries import held_back

    rows = {q.name: q for q in queues.queue_overview(conf.get("DATABASE"))}
    for name in rollups.known_queues(days=1):
        rows.setdefault(name, queues.QueueInfo(name, False, None))
    out = []
    for name in sorted(rows):
        q = rows[name]
        if q.per_key_limit is not None or q.rate is not None or name in flow.controlled_queues():
            f = queues.flow_held(name, conf.get("DATABASE"))  # per key and rate bucket
            held, why = f.held, f.why
        else:
            held, why = held_back(q.due, q.running, q.paused, q.concurrency_limit)
        out.append(
            {
                "name": name,
                "due": q.due,
                "scheduled": q.scheduled,
                "running": q.running,
                "paused": q.paused,
                "limit": q.concurrency_limit,
                "held_back": held,
                "held_because": why,
                "has_row": name in _control_names(),
            }
        )
    return out


def _control_names() -> set[str]:
    return set(queues.queue_names(conf.get("DATABASE")))


def _names(queryset: QuerySet[Any]) -> list[str]:
    return sorted(str(pk) for pk in queryset.values_list("pk", flat=True))
