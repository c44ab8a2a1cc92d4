"""The worker's database sessions: every connection it opens is tagged with its role
(``application_name`` pgjobs:<worker>:<role>) and, outside ``run_jobs()``, notices a dead link
(netsafety.py); the claim connection gets planner statistics once and generic plans."""

from __future__ import annotations

import threading
from typing import Any

from django.db import DatabaseError
from django.db.backends.signals import connection_created

from .. import db, netsafety


class Session:
    def __init__(self, worker_id: str, using: str, inline: bool) -> None:
        self.worker_id = worker_id
        self.using = using
        self.inline = inline  # run_jobs(): the caller's connection is not ours to configure
        self._statistics_checked = False

    def open(self) -> None:
        """From now on, tag (and protect) every connection of ours as it is created."""
        if not self.inline:  # every connection of ours notices a dead link (netsafety.py)
            netsafety.protect_alias(self.using)
            connection_created.connect(self._set_server_keepalives, weak=False)
        connection_created.connect(self._tag_connection, weak=False)

    def close(self) -> None:
        connection_created.disconnect(self._tag_connection)
        connection_created.disconnect(self._set_server_keepalives)

    def prepare(self) -> None:
        """Before each step, on the claim connection."""
        if not self._statistics_checked:  # a fresh table gets planner statistics first
            db.analyze_if_never_analyzed(using=self.using)
            self._statistics_checked = True
        if not self.inline:  # the caller's connection is not ours to configure
            db.use_generic_plans(using=self.using)

    def app_name(self, role: str) -> str:
        return f"pgjobs:{self.worker_id}:{role}"[:63]

    def _set_server_keepalives(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias == self.using:
            netsafety.on_connection_created(sender, connection)

    def _tag_connection(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        thread = threading.current_thread()
        role = (
            "main"
            if thread is threading.main_thread()
            else "services"
            if thread.name == "pgjobs-services"
            else "exec"
        )
        try:
            db.tag_session(connection, self.app_name(role))
        except DatabaseError:  # pragma: no cover - tagging is best effort
            pass
