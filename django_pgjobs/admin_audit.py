"""The trace an admin action leaves: one Django LogEntry per job (the admin's "Recent actions"
and each job's history page), and an entry in the job's own history naming who did it and when.

    reprs(ids)                               -> {id: "type #id"}, read before a delete
    record(request, action, done, reprs)     -> LogEntries + history entries for the jobs done
"""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest

from . import conf, queries
from .models import Job

# action -> (LogEntry flag, change message, history outcome)
ACTIONS = {
    "retry": (CHANGE, "Retried (pending again, due now)", "manual_retry"),
    "run_now": (CHANGE, "Made due now", "run_now"),
    "cancel": (CHANGE, "Cancelled", "cancel"),
    "cancel_requested": (CHANGE, "Cancel requested while running", "cancel"),
    "duplicate": (CHANGE, "Duplicated as a new job", "duplicated"),
    "delete": (DELETION, "Deleted", ""),
}


def reprs(ids: Sequence[int]) -> dict[int, str]:
    rows = (
        Job.objects.using(conf.get("DATABASE")).filter(id__in=list(ids)).values_list("id", "type")
    )
    return {i: f"{t} #{i}" for i, t in rows}


def record(
    request: HttpRequest,
    action: str,
    done: Sequence[int],
    names: dict[int, str] | None = None,
    copies: dict[int, int] | None = None,
) -> None:
    """Log ``action`` on the jobs ``done`` by ``request.user``; ``copies`` maps a duplicated job
    to its new copy (logged as an addition too)."""
    done = list(done)
    if not done:
        return
    flag, message, outcome = ACTIONS[action]
    names = names if names is not None else reprs(done)
    user_id = request.user.pk
    assert user_id is not None  # the admin's actions have a signed-in user
    ctype = ContentType.objects.get_for_model(Job, for_concrete_model=False)
    entries = [
        LogEntry(
            user_id=user_id,
            content_type_id=ctype.pk,
            object_id=str(i),
            object_repr=names.get(i, f"job #{i}")[:200],
            action_flag=flag,
            change_message=message + (f" #{copies[i]}" if copies and i in copies else ""),
        )
        for i in done
    ]
    entries += [
        LogEntry(
            user_id=user_id,
            content_type_id=ctype.pk,
            object_id=str(new),
            object_repr=f"{names.get(src, 'job')} copy #{new}"[:200],
            action_flag=ADDITION,
            change_message=f"Added as a copy of job #{src}",
        )
        for src, new in (copies or {}).items()
    ]
    LogEntry.objects.bulk_create(entries)
    if outcome:
        queries.note_operator_action(
            done,
            outcome,
            f"admin:{request.user.get_username()}",
            copies or {},
            using=conf.get("DATABASE"),
        )
