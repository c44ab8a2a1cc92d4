"""Producer for django-pgjobs: ``enqueue()`` in Django's autocommit mode (one job per
transaction, like a web request) and ``enqueue_many()`` (one call)."""

import os
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "pgjobs_bench"), str(here)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")

import django  # noqa: E402

django.setup()

import clientlib  # noqa: E402
from django_pgjobs import enqueue, enqueue_many  # noqa: E402


def enqueue_one(i: int) -> None:
    enqueue("noop", {"i": i}, queue="default")


def enqueue_batch(seqs: list[int]) -> None:
    enqueue_many("noop", [{"i": i} for i in seqs], queue="default")


if __name__ == "__main__":
    clientlib.main(enqueue_one, enqueue_batch)
