"""QueueRouter: django_pgjobs' models, reads, writes and migrations, on PGJOBS["DATABASE"].

    DATABASE_ROUTERS = ["django_pgjobs.routers.QueueRouter"]

Put it after routers of your own that send other apps to the queue's database: on that
database (when it is not "default") it refuses the migrations of every other app, so that
``migrate --database queue`` creates the queue's tables and nothing else. See
docs/queue-database.md.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

from . import conf

APP_LABEL = "django_pgjobs"


class QueueRouter:
    """Sends django_pgjobs to PGJOBS["DATABASE"]; has no opinion on any other app elsewhere."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return conf.get("DATABASE") if _ours(model) else None

    def db_for_write(self, model: type, **hints: Any) -> str | None:
        return conf.get("DATABASE") if _ours(model) else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        if _ours(type(obj1)) or _ours(type(obj2)):  # no relation crosses the two databases
            return _ours(type(obj1)) and _ours(type(obj2))
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        alias = conf.get("DATABASE")
        if app_label == APP_LABEL:
            return db == alias
        if db == alias and alias != DEFAULT_DB_ALIAS:
            return False  # the queue's own database holds the queue only
        return None


def _ours(model: type) -> bool:
    meta = getattr(model, "_meta", None)
    return meta is not None and meta.app_label == APP_LABEL
