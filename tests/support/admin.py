"""Rows in every state, written directly (the admin reads them; queries.py changes them)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Permission, User
from django.utils import timezone

from django_pgjobs.models import Job

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/jobs.py", line 12, in handler\n'
    "    raise ValueError(msg)\n"
    "ValueError: card <b>declined</b>\nsecond line of the message\n"
)


def make_job(status: str = "PENDING", **fields: Any) -> Job:
    return Job.objects.create(**job_values(status, **fields))


def job_values(status: str = "PENDING", **fields: Any) -> dict[str, Any]:
    """A job row's fields in ``status`` (the times, lease and error that status has)."""
    now = timezone.now()
    values: dict[str, Any] = {
        "type": "test.behave",
        "queue": "default",
        "status": status,
        "config": {"do": "ok"},
        "max_attempts": 3,
    }
    if status == "RUNNING":
        values.update(
            lease_token=uuid.uuid4(),
            lease_expires_at=now + timedelta(seconds=30),
            started_at=now,
            attempts=1,
            locked_by="host:1:abc",
        )
    if status in ("COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED"):
        values.update(
            started_at=now - timedelta(seconds=2),
            finished_at=now,
            duration_ms=1500,
            attempts=1,
            locked_by="host:1:abc",
        )
    if status == "FAILED":
        values.update(error=TRACEBACK, attempts=3)
    values.update(fields)
    return values


def staff_user(username: str, *perms: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_pgjobs", codename=codename)
        )
    return User.objects.get(pk=user.pk)  # fresh permission cache


def make_workflow(
    name: str = "import",
    steps: tuple[tuple[str, int, tuple[str, ...], str], ...] = (),
    **fields: Any,
) -> int:
    """A workflow written directly: ``steps`` are (name, jobs, parent steps, status); every job of
    a step depends on every job of its parent steps. Returns the workflow's id."""
    from django_pgjobs.models import Dependency, Workflow

    wf = Workflow.objects.create(name=name, **fields)
    ids: dict[str, list[int]] = {}
    for step, n, parents, status in steps:
        jobs = [
            Job(
                **job_values(
                    status,
                    type=f"shop.{step}",
                    config={"part": i},
                    result={"rows": i} if status == "COMPLETED" else {},
                    workflow_id=wf.pk,
                    step=step,
                    deps_open=sum(len(ids[p]) for p in parents) if status == "WAITING" else 0,
                    has_dependants=any(step in ps for _, _, ps, _ in steps),
                )
            )
            for i in range(n)
        ]
        ids[step] = [j.pk for j in Job.objects.bulk_create(jobs)]
        edges = [
            Dependency(parent_id=p, child_id=c, mode="success")
            for parent in parents
            for p in ids[parent]
            for c in ids[step]
        ]
        Dependency.objects.bulk_create(edges, batch_size=5000)
    return wf.pk
