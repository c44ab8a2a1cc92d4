"""manage.py pgjobs_stats [--json]: queue depth, oldest due age, running, failures, p50/p95."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from django.core.management.base import CommandError
from django.db import InterfaceError, OperationalError

from ... import conf, db, stats
from ...exceptions import NotMigrated
from ..arguments import add_database_flag
from ..base import PgjobsCommand


class Command(PgjobsCommand):
    help = (
        "Show per-queue depth, oldest due age, running and failed jobs, and p50/p95 "
        "duration per job type over 24 h."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
        add_database_flag(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            with db.tables_required(opts["database"]):
                data = stats.snapshot(opts["database"])
        except NotMigrated as exc:
            raise CommandError(str(exc)) from None
        except (OperationalError, InterfaceError) as exc:  # as pgjobs_health says it
            self._unreachable(opts["database"] or conf.get("DATABASE"), exc, opts["json"])
        if opts["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
            return
        self.stdout.write(
            _table(
                "Queues",
                [
                    "queue",
                    "due",
                    "scheduled",
                    "running",
                    "stale",
                    "oldest due (s)",
                    "completed/min",
                    "completed 24h",
                    "failed 24h",
                ],
                [
                    [
                        q["queue"],
                        q["due"],
                        q["scheduled"],
                        q["running"],
                        q["stale"],
                        "-" if q["oldest_due_age_s"] is None else f"{q['oldest_due_age_s']:.1f}",
                        q["throughput_per_min"],
                        q["completed_24h"],
                        q["failed_24h"],
                    ]
                    for q in data["queues"]
                ],
            )
        )
        self.stdout.write(
            _table(
                "Job types, last 24 h",
                ["type", "runs", "p50 (ms)", "p95 (ms)", "failures"],
                [
                    [t["type"], t["runs"], _ms(t["p50_ms"]), _ms(t["p95_ms"]), t["failures"]]
                    for t in data["types_24h"]
                ],
            )
        )
        self.stdout.write(
            _table(
                "Workers",
                ["worker", "queues", "threads", "jobs done", "heartbeat age (s)"],
                [
                    [
                        w["worker_id"],
                        ",".join(w["queues"]),
                        w["concurrency"],
                        w["jobs_done"],
                        w["heartbeat_age_s"],
                    ]
                    for w in data["workers"]
                ],
            )
        )

    def _unreachable(self, alias: str, exc: Exception, as_json: bool) -> NoReturn:
        message = (
            f"cannot reach database {alias!r}: {exc.__class__.__name__}: "
            f"{' '.join(str(exc).split())[:500]}"
        )
        if as_json:
            self.stdout.write(json.dumps({"error": message}))
        else:
            self.stderr.write(f"ERROR: {message}")
        sys.exit(1)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return f"{title}: none\n"
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title]
    for n, r in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n\n"
