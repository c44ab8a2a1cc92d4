"""manage.py pgjobs_queue pause NAME | resume NAME | limit NAME N|none | per-key NAME N|none |
rate NAME RATE|none [--burst N] [--per-key] | list"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from ... import flow, oplog
from ...exceptions import InvalidJobOption
from ...models import Queue
from ...sql import queues
from ...validation import check_queue
from ..arguments import add_database_flag
from ..base import PgjobsCommand


def _at_least(value: str, least: int, what: str, none: bool = True) -> int | None:
    """``value`` as an integer >= ``least`` ('none' -> None where ``none``), else CommandError."""
    if none and value.lower() == "none":
        return None
    try:
        n = int(value)
    except ValueError:
        n = least - 1
    if n < least:
        alt = " or 'none'" if none else ""
        raise CommandError(f"{what} must be an integer >= {least}{alt}, got {value!r}")
    return n


def _rate(value: str) -> float | None:
    if value.lower() == "none":
        return None
    try:
        return flow.parse_rate(value)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


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
        per_key = sub.add_parser("per-key", help="cap the RUNNING jobs of each flow key")
        per_key.add_argument("name", help="queue name")
        per_key.add_argument("limit", help="an integer >= 1, or 'none' to remove the row's cap")
        rate = sub.add_parser("rate", help="cap the starts per period (a token per claimed job)")
        rate.add_argument("name", help="queue name")
        rate.add_argument("rate", help="'10/s', '600/m', '5/10s', or 'none' to remove it")
        rate.add_argument("--burst", help="starts allowed at once (default 1)")
        rate.add_argument(
            "--per-key", action="store_true", help="a bucket per flow key, not one per queue"
        )
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
            limit = _at_least(opts["limit"], 0, "limit")
            info = queues.set_queue_limit(name, limit, using)
            done = "Limit removed" if limit is None else f"Limit set to {limit}"
        elif action in ("per-key", "rate"):
            done = self._flow(action, name, opts, using)
            self.stdout.write(f"queue {name}: {done}")
            oplog.record_command(Queue, [name], done, "pgjobs_queue")
            return
        else:
            info = queues.set_queue_paused(name, action == "pause", using)
            done = "Paused (running jobs finish)" if action == "pause" else "Resumed"
        self.stdout.write(f"queue {info.name}: {_describe(info)}")
        missing = oplog.record_command(Queue, [info.name], done, "pgjobs_queue")
        if missing:
            self.stderr.write(f"not recorded in the admin's history: {missing}")

    def _flow(self, action: str, name: str, opts: dict[str, Any], using: str | None) -> str:
        """Set the row's per-key limit or rate (checked before any SQL); what was done."""
        if action == "per-key":
            n = _at_least(opts["limit"], 1, "per-key limit")
            queues.set_queue_per_key(name, n, using)
            return "per-key limit removed" if n is None else f"at most {n} running per key"
        burst = opts["burst"]
        rate = _rate(opts["rate"])
        burst = None if burst is None else _at_least(burst, 1, "--burst", none=False)
        if rate is None and (burst is not None or opts["per_key"]):
            raise CommandError("--burst and --per-key go with a rate, not with 'none'")
        queues.set_queue_rate(name, rate, burst, opts["per_key"] or None, using)
        if rate is None:
            return "rate removed"
        scope = "per key" if opts["per_key"] else "for the queue"
        return f"rate {flow.rate_text(rate)} {scope}, burst {burst or 1}"

    def _list(self, using: str | None) -> None:
        rows = queues.queue_overview(using)
        if not rows:
            self.stdout.write("no queue has controls or active jobs")
            return
        width = max(5, *(len(r.name) for r in rows))
        self.stdout.write(
            f"{'QUEUE':<{width}}  {'STATE':<7}  {'LIMIT':>5}  {'PER_KEY':>7}  {'RATE':>12}  "
            f"{'DUE':>8}  {'LATER':>8}  {'RUNNING':>7}  {'HELD':>6}  {'FAIR':<16}  WHY"
        )
        declared = flow.queues()
        for r in rows:
            d = declared.get(r.name, flow.FlowSettings())
            cap = r.concurrency_limit if r.concurrency_limit is not None else d.concurrency
            per_key = r.per_key_limit if r.per_key_limit is not None else d.per_key
            rate = r.rate if r.rate is not None else d.rate
            burst = r.burst if r.burst is not None else d.burst
            by_key = r.rate_per_key if r.rate_per_key is not None else d.rate_per_key
            rate_text = flow.rate_text(rate)
            if rate is not None:
                rate_text += f"+{burst or 1}" + ("/key" if by_key else "")
            held = queues.flow_held(r.name, using) if (cap, per_key, rate) != (None,) * 3 else None
            if held is None and r.paused:
                held = queues.FlowHeld(r.due, "paused" if r.due else "")
            self.stdout.write(
                f"{r.name:<{width}}  {'paused' if r.paused else 'open':<7}  "
                f"{'-' if cap is None else cap:>5}  {'-' if per_key is None else per_key:>7}  "
                f"{rate_text:>12}  {r.due:>8}  {r.scheduled:>8}  {r.running:>7}  "
                f"{held.held if held else 0:>6}  {flow.fair_text(d.fair):<16}  "
                f"{held.why if held else ''}"
            )


def _describe(info: queues.QueueInfo) -> str:
    state = "paused" if info.paused else "open"
    limit = (
        "no concurrency limit"
        if info.concurrency_limit is None
        else f"at most {info.concurrency_limit} running"
    )
    return f"{state}, {limit}"
