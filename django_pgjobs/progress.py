"""Progress reports of a running job: what ``job.progress(done, total, note)`` accepts, and
the shape stored in ``Job.progress``::

    {"done": 40, "total": 120, "note": "resizing images", "at": "2026-12-01T21:45:32.1+00:00"}

``total`` and ``note`` may be null; ``at`` is the database's clock at the moment of the report.
The worker writes the latest report of each job at most once per WRITE_INTERVAL, and the last
one with the job's outcome (worker/progress.py).
"""

from __future__ import annotations

import math
from typing import Any

from .exceptions import InvalidProgress

MAX_NOTE_CHARS = 200
WRITE_INTERVAL = 1.0  # seconds: the most often one worker writes progress


def check(done: Any, total: Any = None, note: Any = None) -> tuple[Any, Any, str | None]:
    """``(done, total, note)`` as stored, or InvalidProgress saying what is wrong."""
    _number("done", done)
    if total is not None:
        _number("total", total)
        if done > total:
            raise InvalidProgress(
                f"job.progress(done={done!r}, total={total!r}): done must not exceed total"
            )
    if note is not None:
        if not isinstance(note, str):
            raise InvalidProgress(
                f"job.progress(note=...) takes a string or None, got {type(note).__name__}"
            )
        if len(note) > MAX_NOTE_CHARS:
            raise InvalidProgress(
                f"job.progress(note=...) takes at most {MAX_NOTE_CHARS} characters, got {len(note)}"
            )
        # NUL and lone surrogates shown as escapes, as in errors (worker/storable.py)
        note = note.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode()
    return done, total, note


def _number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProgress(
            f"job.progress({name}=...) takes a number, got {type(value).__name__} {value!r}"[:300]
        )
    if not math.isfinite(value) or value < 0:
        raise InvalidProgress(
            f"job.progress({name}={value!r}): {name} must be a finite number >= 0"
        )


def record(done: Any, total: Any, note: str | None, age: float) -> dict[str, Any]:
    """What the worker sends: the report and its age in seconds (the SQL turns the age into
    ``at`` on the database clock)."""
    return {"done": done, "total": total, "note": note, "age": max(0.0, age)}
