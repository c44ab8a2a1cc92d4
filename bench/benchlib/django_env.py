"""In-process django-pgjobs for the micro-benchmarks (enqueue_cpu.py, hot_path.py): the bench
project's settings and drivers on the path, then ``django.setup()``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent


def setup() -> None:
    """Import path and settings of bench/pgjobs_bench (DATABASE_URL picks the server)."""
    sys.path[:0] = [str(BENCH / "pgjobs_bench"), str(BENCH / "drivers")]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    import django

    django.setup()
