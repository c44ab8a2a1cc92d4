"""Producer for django-tasks-db: ``Task.enqueue()`` in autocommit (one job per
transaction).  django.tasks has no bulk enqueue, so there is no enqueue_bulk number;
drain prefills build the same rows the backend's ``_task_to_db_task`` creates and
``bulk_create`` them (untimed)."""

import os
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "tasksdb_bench"), str(here)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tasksdb_settings")

import django  # noqa: E402

django.setup()

import clientlib  # noqa: E402
from benchtasks.tasks import noop  # noqa: E402
from django.db import transaction  # noqa: E402
from django_tasks_db.models import DBTaskResult, get_date_max  # noqa: E402


def enqueue_one(i: int) -> None:
    noop.enqueue(i=i)


def prefill_many(seqs: list[int]) -> None:
    backend = noop.get_backend()
    rows = [
        DBTaskResult(
            id=backend._get_id(),
            args_kwargs={"args": [], "kwargs": {"i": i}},
            priority=noop.priority,
            task_path=noop.module_path,
            queue_name=noop.queue_name,
            run_after=noop.run_after or get_date_max(),  # what its pre_save signal sets
            backend_name=backend.alias,
        )
        for i in seqs
    ]
    with transaction.atomic():
        DBTaskResult.objects.bulk_create(rows, batch_size=5000)


if __name__ == "__main__":
    clientlib.main(enqueue_one, prefill_many)
