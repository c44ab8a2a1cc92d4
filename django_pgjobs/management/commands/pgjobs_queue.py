"""manage.py pgjobs_queue pause NAME | resume NAME | limit NAME N|none | list"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from ... import oplog
from ...exceptions import InvalidJobOption
from ...models import Queue
from ...sql import queues
from ...validation import check_queue
from ..arguments import add_database_flag
from ..base import PgjobsCommand


def _limit(value: str) -> int | None:
    if value.lower() == "none":
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise CommandError(f"limit must be an integer >= 0 or 'none', got {value!r}")
    return n


class Command(PgjobsCommand):
    help = (
        "Pause, resume or cap a queue across all workers, or list queues. A paused queue is "
        "not claimed (running jobs finish); a limit caps its RUNNING jobs cluster-wide."
    )

    def add_arguments(self, parser: Any) -> None:
        add_database_flag(parser)  # before the action: pgjobs_queue --database queue list
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        for action, text in (
            ("pause", "stop claiming the queue's jobs"),
            ("resume", "claim the queue's jobs again"),
        ):
            sub.add_parser(action, help=text).add_argument("name", help="queue name")
        limit = sub.add_parser("limit", help="cap the queue's RUNNING jobs across all workers")
        limit.add_argument("name", help="queue name")
        limit.add_argument("limit", help="an integer >= 0, or 'none' to remove the cap")
        sub.add_parser("list", help="queues with their controls and job counts")

    def handle(self, *args: Any, **opts: Any) -> None:
        action, using = opts["action"], opts["database"]
        if action == "list":
            self._list(using)
            return
        try:
            name = check_queue(opts["name"])
        except InvalidJobOption as exc:
            raise CommandError(str(exc)) from None
        if action == "limit":
            limit = _limit(opts["limit"])
            info = queues.set_queue_limit(name, limit, using)
            done = "Limit removed" if limit is None else f"Limit set to {limit}"
        else:
            info = queues.set_queue_paused(name, action == "pause", using)
            done = "Paused (running jobs finish)" if action == "pause" else "Resumed"
        self.stdout.write(f"queue {info.name}: {_describe(info)}")
        missing = oplog.record_command(Queue, [info.name], done, "pgjobs_queue")
        if missing:
            self.stderr.write(f"not recorded in the admin's history: {missing}")

    def _list(self, using: str | None) -> None:
        rows = queues.queue_overview(using)
        if not rows:
            self.stdout.write("no queue has controls or active jobs")
            return
        width = max(5, *(len(r.name) for r in rows))
        self.stdout.write(
            f"{'QUEUE':<{width}}  {'STATE':<7}  {'LIMIT':>5}  {'DUE':>8}  "
            f"{'LATER':>8}  {'RUNNING':>7}"
        )
        for r in rows:
            limit = "-" if r.concurrency_limit is None else str(r.concurrency_limit)
            self.stdout.write(
                f"{r.name:<{width}}  {'paused' if r.paused else 'open':<7}  "
                f"{limit:>5}  {r.due:>8}  {r.scheduled:>8}  {r.running:>7}"
            )


def _describe(info: queues.QueueInfo) -> str:
    state = "paused" if info.paused else "open"
    limit = (
        "no concurrency limit"
        if info.concurrency_limit is None
        else f"at most {info.concurrency_limit} running"
    )
    return f"{state}, {limit}"
