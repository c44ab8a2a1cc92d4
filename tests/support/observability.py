from __future__ import annotations

from tests.conftest import missing_requirement, run_worker

__all__ = ["require_extra", "run_worker"]


def require_extra(module: str, extra: str):
    """Import an optional extra; without it the test fails, saying how to install it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        missing_requirement(module, f"pip install -e '.[{extra}]'")
