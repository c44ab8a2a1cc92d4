"""Operator actions on queues and schedules, from the admin or a command, as Django LogEntries
(the object's History page and the admin's "Recent actions").

    record(user_id, model, names, message)        -> one LogEntry per object, by that user
    record_command(model, names, message, command) -> the same by the inactive user
                                                      "pgjobs-command", the OS user in the text
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

from django.apps import apps

COMMAND_USER = "pgjobs-command"
log = logging.getLogger(__name__)


def record(user_id: Any, model: type, names: Sequence[str], message: str) -> int:
    """LogEntries (CHANGE) on ``model``'s objects ``names``; 0 without django.contrib.admin."""
    if not names or not apps.is_installed("django.contrib.admin"):
        return 0
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.contenttypes.models import ContentType

    ctype = ContentType.objects.get_for_model(model, for_concrete_model=False)
    LogEntry.objects.bulk_create(
        [
            LogEntry(
                user_id=user_id,
                content_type_id=ctype.pk,
                object_id=str(n),
                object_repr=str(n)[:200],
                action_flag=CHANGE,
                change_message=message,
            )
            for n in names
        ]
    )
    return len(names)


def record_command(model: type, names: Sequence[str], message: str, command: str) -> str | None:
    """record() as the command user; None when done, else why nothing was recorded."""
    if not apps.is_installed("django.contrib.admin"):
        return None  # no admin, no history to write
    try:
        user_id = command_user_id()
        record(
            user_id,
            model,
            names,
            f"{message} ({command}, OS user {os_user()} on {socket.gethostname()})",
        )
    except Exception as exc:  # noqa: BLE001 - the change is made; say the trace is missing
        log.warning("oplog.not_recorded: %s", exc)
        return f"{type(exc).__name__}: {exc}"
    return None


def command_user_id() -> Any:
    """The pk of the inactive, password-less user that commands' entries are logged by."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    field = user_model.USERNAME_FIELD
    found = (
        user_model._default_manager.filter(**{field: COMMAND_USER})
        .values_list("pk", flat=True)
        .first()
    )
    if found is not None:
        return found
    user = user_model(**{field: COMMAND_USER})
    if hasattr(user, "is_active"):
        user.is_active = False
    user.set_unusable_password()
    user.save()
    return user.pk


def os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no passwd entry (some containers)
        return f"uid {os.getuid()}"
