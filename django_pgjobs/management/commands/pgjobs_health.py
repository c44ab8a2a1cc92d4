"""manage.py pgjobs_health [--json] [thresholds]: exit 0 when healthy, 1 with the reasons."""

from __future__ import annotations

import json
import sys
from typing import Any

from ...health_checks import Thresholds, report
from ...tables import JOB_TABLE
from ..arguments import add_database_flag, bounded
from ..base import PgjobsCommand

_number = bounded(float, low=0, high=1e12, what="a number >= 0")


class Command(PgjobsCommand):
    help = (
        "Check the queue's health: table and index sizes, dead tuples, long transactions, "
        "stale leases, backlog age, unknown job types. Exit status 1 when unhealthy."
    )

    def add_arguments(self, parser: Any) -> None:
        d = Thresholds()
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        parser.add_argument(
            "--max-due-age",
            type=_number,
            default=d.max_due_age,
            metavar="SECONDS",
            help=f"oldest due job (default {d.max_due_age:g})",
        )
        parser.add_argument(
            "--max-transaction-age",
            type=_number,
            default=d.max_transaction_age,
            metavar="SECONDS",
            help=f"oldest open transaction (default {d.max_transaction_age:g})",
        )
        parser.add_argument(
            "--max-snapshot-age",
            type=_number,
            default=d.max_snapshot_age,
            metavar="SECONDS",
            help=f"oldest snapshot holding back vacuum (default {d.max_snapshot_age:g})",
        )
        parser.add_argument(
            "--max-dead-ratio",
            type=_number,
            default=d.max_dead_ratio,
            help=f"dead/(live+dead) tuples of {JOB_TABLE} (default {d.max_dead_ratio:g})",
        )
        parser.add_argument(
            "--min-dead-tuples",
            type=int,
            default=d.min_dead_tuples,
            help=f"dead tuples ignored below this count (default {d.min_dead_tuples})",
        )
        parser.add_argument(
            "--stale-lease-grace",
            type=_number,
            metavar="SECONDS",
            help="seconds past expiry before a lease counts as stale "
            "(default 3 x PGJOBS['REAP_INTERVAL'])",
        )
        parser.add_argument(
            "--allow-unknown-types",
            action="store_true",
            help="due jobs of unregistered types do not make it unhealthy",
        )
        parser.add_argument(
            "--max-table-mb",
            type=_number,
            metavar="MB",
            help=f"total size of {JOB_TABLE} (default: not checked)",
        )
        parser.add_argument(
            "--max-loop-lag",
            type=_number,
            default=d.max_loop_lag,
            metavar="SECONDS",
            help="worst lag of a worker's event loop (async handlers) since its heartbeat "
            f"(default {d.max_loop_lag:g})",
        )
        add_database_flag(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        thresholds = Thresholds(
            max_due_age=opts["max_due_age"],
            max_transaction_age=opts["max_transaction_age"],
            max_snapshot_age=opts["max_snapshot_age"],
            max_dead_ratio=opts["max_dead_ratio"],
            min_dead_tuples=opts["min_dead_tuples"],
            stale_lease_grace=opts["stale_lease_grace"],
            allow_unknown_types=opts["allow_unknown_types"],
            max_table_mb=opts["max_table_mb"],
            max_loop_lag=opts["max_loop_lag"],
        )
        result = report(thresholds, using=opts["database"])
        if opts["json"]:
            self.stdout.write(json.dumps(result, indent=2, default=str))
        else:
            self._print(result)
        if not result["healthy"]:
            sys.exit(1)

    def _print(self, result: dict[str, Any]) -> None:
        m = result["metrics"]
        w = self.stdout.write
        w(f"django-pgjobs {result['version']}")
        if m is None:  # the database is unreachable or not migrated: problems say which
            for problem in result["problems"]:
                self.stderr.write(f"UNHEALTHY: {problem}")
            return
        for name, t in m["tables"].items():
            w(
                f"{name}: {_mb(t['total_bytes'])} (table {_mb(t['table_bytes'])}, indexes "
                f"{_mb(t['index_bytes'])}), {t['live_tuples']} live / {t['dead_tuples']} dead "
                f"tuples, last autovacuum {t['last_autovacuum'] or 'never'}"
            )
        for name, i in m["indexes"].items():
            w(f"  index {name}: {_mb(i['bytes'])}, {i['scans']} scans")
        tx = m["oldest_transaction"]
        w(
            "oldest transaction: "
            + (
                "none open"
                if tx is None
                else f"{tx['age_seconds']:.1f} s (pid {tx['pid']}, {tx['state']}, "
                f"application {tx['application_name']!r})"
            )
        )
        for h in m["old_snapshots"]:
            w(
                f"holds back vacuum: pid {h['pid']} for {h['age_seconds']:.1f} s "
                f"(application {h['application_name']!r}, {h['state']})"
            )
        lz = m["leases"]
        w(f"expired leases: {lz['expired']} ({lz['stale']} older than {lz['grace_seconds']:g} s)")
        b = m["backlog"]
        age = b["oldest_due_age_seconds"]
        w(f"due jobs: {b['due']}, oldest waiting " + ("-" if age is None else f"{age:.1f} s"))
        w(
            "unknown types due: "
            + (", ".join(f"{u['type']} ({u['due']})" for u in m["unknown_types"]) or "none")
        )
        w(f"live workers: {m['live_workers']}")
        w("event loop lag: " + (_lags(m["event_loops"]) or "no live worker runs async handlers"))
        if result["healthy"]:
            w(self.style.SUCCESS("healthy"))
            return
        for problem in result["problems"]:
            self.stderr.write(f"UNHEALTHY: {problem}")


def _lags(loops: list[dict[str, Any]]) -> str:
    """Each live worker's worst loop lag since its last heartbeat, the worst first."""
    return ", ".join(f"{w['worker_id']} {w['loop_lag_seconds']:.3f} s" for w in loops)


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MB"
