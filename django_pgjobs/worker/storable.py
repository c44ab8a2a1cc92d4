"""What a handler produced, made storable: PostgreSQL's text and jsonb refuse NUL and lone
surrogates, so they are escaped visibly (``\\x00``, ``\\udc80``) instead of failing the write."""

from __future__ import annotations

import json
import re
from typing import Any

# In json.dumps() output (ASCII): a NUL, or a UTF-16 surrogate escape (paired or not).
_SUSPECT_JSON = re.compile(r"\\u0000|\\ud[89a-f]", re.IGNORECASE)


def storable_text(text: str) -> str:
    """``text`` with NUL shown as ``\\x00`` and lone surrogates as ``\\udXXX``."""
    if text.isascii() and "\x00" not in text:
        return text
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def storable_json(value: Any) -> tuple[Any, str]:
    """``value`` (plain JSON data) and its JSON text, every string and key storable.

    Raises TypeError/ValueError, as json.dumps(), for what is not JSON at all."""
    text = json.dumps(value, allow_nan=False)
    if not _SUSPECT_JSON.search(text):
        return value, text
    value = _escaped(value)
    return value, json.dumps(value, allow_nan=False)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {
            storable_text(str(k)) if isinstance(k, str) else k: _escaped(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    return value
