#!/usr/bin/env python
"""manage.py of the benchmark's django-pgjobs project (runs in bench/.venvs/pgjobs)."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent / "drivers")]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
