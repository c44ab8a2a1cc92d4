from __future__ import annotations

import os

import pytest

from django_pgjobs.worker import Worker, WorkerOptions


def run_worker(**options) -> Worker:
    """Process every due job in this process (burst), then return the stopped worker."""
    worker = Worker(WorkerOptions(burst=True, listen=False, install_signal_handlers=False,
                                  concurrency=2, **options))
    worker.run()
    return worker


def require_extra(module: str, extra: str):
    """Import an optional extra; without it, skip locally but FAIL under CI=true."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{module} is not installed but CI is set: install the extra with "
                        f"pip install -e '.[{extra}]' (see .ci/run)")
        pytest.skip(f"{module} not installed (pip install -e '.[{extra}]')")
