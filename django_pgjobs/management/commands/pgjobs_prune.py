"""manage.py pgjobs_prune [--dry-run] [--status S] [--older-than DAYS] [--batch-size N]"""

from __future__ import annotations

from typing import Any

from ... import retention
from ..arguments import add_database_flag, bounded
from ..base import PgjobsCommand

_days = bounded(float, low=0, high=100_000, what="a number of days >= 0")
_batch = bounded(int, low=1, high=100_000, what="an integer in [1, 100000]")


class Command(PgjobsCommand):
    help = (
        "Delete finished jobs older than PGJOBS['RETENTION'] (per status), in small batches. "
        "Workers do this every PGJOBS['PRUNE_INTERVAL'] seconds; this runs it now."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be deleted, delete nothing"
        )
        parser.add_argument(
            "--status",
            action="append",
            choices=retention.JOB_STATUSES,
            help="only this status (repeatable; default: every finished status)",
        )
        parser.add_argument(
            "--older-than",
            type=_days,
            metavar="DAYS",
            help="override the retention: jobs finished more than DAYS ago",
        )
        parser.add_argument(
            "--batch-size",
            type=_batch,
            default=retention.BATCH,
            help=f"ids per DELETE (default {retention.BATCH})",
        )
        add_database_flag(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        statuses = opts["status"]
        older_than = opts["older_than"]
        if opts["dry_run"]:
            planned = retention.plan(
                statuses=statuses, older_than=older_than, using=opts["database"]
            )
            if not planned:
                self.stdout.write("nothing to prune: every selected status is kept forever")
            for status, (cutoff, count) in planned.items():
                self.stdout.write(
                    f"would delete {count} {status} jobs finished before "
                    f"{cutoff.isoformat(timespec='seconds')}"
                )
            return
        counts = retention.prune_once(
            statuses=statuses,
            older_than=older_than,
            batch=opts["batch_size"],
            max_batches=None,
            using=opts["database"],
        )
        keys = list(statuses or retention.JOB_STATUSES)
        if not statuses and older_than is None:  # a full pass also prunes these
            keys += ["schedule_fires", "workers"]
        for key in keys:
            if key in counts:
                self.stdout.write(f"deleted {counts[key]} {_label(key)}")
            else:
                self.stdout.write(f"kept {_label(key)}: no retention set (PGJOBS['RETENTION'])")


def _label(key: str) -> str:
    return {"schedule_fires": "schedule fire records", "workers": "stale worker rows"}.get(
        key, f"{key} jobs"
    )
