"""The commands' base class: the queue's database alias gets netsafety's client options
(connect timeout, keepalives, user timeout) before the command's first byte to it, system
checks included, so a database that accepts TCP and never answers fails a command instead of
hanging it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import connections

from .. import conf, netsafety


class PgjobsCommand(BaseCommand):
    def execute(self, *args: Any, **options: Any) -> Any:
        alias = options.get("database") or conf.get("DATABASE")
        if alias in connections.settings:  # else the command (or pgjobs.E checks) says so
            netsafety.protect_alias(alias)
        return super().execute(*args, **options)
