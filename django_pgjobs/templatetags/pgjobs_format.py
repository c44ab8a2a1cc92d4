"""Template filters of the admin pages: admin_format's helpers for values the views pass raw."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from .. import admin_format

register = template.Library()


@register.filter
def breakable(value: Any) -> SafeString:
    """An identifier that wraps only after . _ : (types, queues, worker ids)."""
    return admin_format.breakable(value)


@register.filter
def when(value: Any) -> SafeString | str:
    """The admin's one date format (admin_format.when), e.g. on the History page."""
    return admin_format.when(value)
