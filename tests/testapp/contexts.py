"""A JobContext for tests that need a running job's handle without a claim."""

from datetime import datetime, timezone
from typing import Any
from uuid import uuid4

from django_pgjobs.context import JobContext


def job_context(**fields: Any) -> JobContext:
    """A first attempt of type ``t`` on ``default``; ``fields`` override any argument."""
    values: dict[str, Any] = {
        "id": 1,
        "type": "t",
        "queue": "default",
        "priority": 0,
        "config": {},
        "attempts": 1,
        "max_attempts": 3,
        "trace_id": None,
        "tenant_id": None,
        "created_at": datetime.now(timezone.utc),
        "worker_id": "w",
        "lease_token": uuid4(),
    }
    return JobContext(**{**values, **fields})
