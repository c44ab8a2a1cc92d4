"""manage.py runjobs: flags -> WorkerOptions -> Worker(...).run()."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import InterfaceError, OperationalError, connections

from ... import conf, db, registry, scheduler
from ...exceptions import InvalidJobOption, NotMigrated
from ...sql import queues
from ...validation import check_queue
from ...worker import Worker, WorkerOptions, console
from ...worker.guard import log_db_error, log_gave_up
from ...worker.policy import EXIT_DATABASE_UNREACHABLE, ErrorPolicy
from ..arguments import (
    add_database_flag,
    add_setting_flags,
    bounded,
    flag_warnings,
    positive_int,
    setting_flags,
)
from ..base import PgjobsCommand


def _queues(value: str) -> list[str]:
    names = [q.strip() for q in value.split(",") if q.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of queue names")
    try:
        return [check_queue(q) for q in names]
    except InvalidJobOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_seconds = bounded(
    float, low=0, high=conf.MAX_SECONDS, low_inclusive=False, what="a number of seconds > 0"
)


def _worker_id(value: str) -> str:
    if not value or len(value) > 200 or not value.isprintable():
        raise argparse.ArgumentTypeError("worker id must be 1-200 printable characters")
    return value


def _port(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535, got {n}")
    return n


def unknown_queues(names: list[str], using: str) -> list[str]:
    """Those of ``names`` that nothing names: handlers, tasks, schedules, DEFAULT_QUEUE, queue
    controls, pending jobs (the last looked up only for names the others do not know)."""
    known = {conf.get("DEFAULT_QUEUE"), *queues.queue_names(using)}
    known.update(
        spec.effective_queue()
        for spec in map(registry.get, registry.registered_types())
        if spec is not None
    )
    known.update(s.queue for s in scheduler.load()[0] if s.queue)
    for backend in getattr(settings, "TASKS", {}).values():
        if isinstance(backend, dict) and backend.get("BACKEND", "").startswith("django_pgjobs."):
            known.update(backend.get("QUEUES") or [])
    unknown = [n for n in names if n not in known]
    return [n for n in unknown if not queues.has_pending(n, using)]


class Command(PgjobsCommand):
    help = "Run a django-pgjobs worker: claim due jobs, run their handlers, record the outcome."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--queues", type=_queues, help="comma-separated queues (default: all)")
        # --concurrency, --batch-size, --prefetch, --poll-interval, --shutdown-timeout, --lease,
        # --reap-interval: from conf.SETTINGS, each with its setting's rule.
        add_setting_flags(parser)
        parser.add_argument(
            "--burst", action="store_true", help="process every due job, then exit 0"
        )
        parser.add_argument(
            "--give-up-after",
            type=_seconds,
            metavar="SECONDS",
            help="with --burst: exit with code 4 once the database stayed "
            f"unreachable this long (default {WorkerOptions.give_up_after:g})",
        )
        parser.add_argument("--max-jobs", type=positive_int, help="exit after this many jobs")
        parser.add_argument("--worker-id", type=_worker_id, help="name shown in logs and admin")
        parser.add_argument(
            "--no-listen", action="store_true", help="do not LISTEN for wakeups; poll only"
        )
        parser.add_argument(
            "--health-port", type=_port, help="serve /livez, /readyz and /metrics on this port"
        )
        parser.add_argument(
            "--health-host",  # default: WorkerOptions.health_host
            help="address of the health endpoints (default: all interfaces)",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="do not fire cron schedules from this worker",
        )
        parser.add_argument(
            "--no-prune",
            action="store_true",
            help="do not delete old finished jobs from this worker",
        )
        add_database_flag(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        console.setup(opts["verbosity"])
        if opts["database"]:  # for the whole process: its handlers' enqueues go there too
            settings.PGJOBS = {**getattr(settings, "PGJOBS", {}), "DATABASE": opts["database"]}
            conf.get_settings.cache_clear()
        for warning in flag_warnings(opts):  # e.g. --lease under 3 s, worded as pgjobs.W001
            self.stderr.write(f"WARNING: {warning}", style_func=self.style.WARNING)
        options = WorkerOptions.from_settings(
            **setting_flags(opts),
            queues=opts["queues"],
            burst=opts["burst"] or None,
            give_up_after=opts["give_up_after"],
            max_jobs=opts["max_jobs"],
            worker_id=opts["worker_id"],
            listen=False if opts["no_listen"] else None,
            health_port=opts["health_port"],
            health_host=opts["health_host"],
            scheduler=False if opts["no_scheduler"] else None,
            prune=False if opts["no_prune"] else None,
        )
        if not self._reach_database(options):
            sys.exit(EXIT_DATABASE_UNREACHABLE)
        code = Worker(options).run()
        if code:
            sys.exit(code)

    def _reach_database(self, options: WorkerOptions) -> bool:
        """Check the tables and the --queues names. With the database unreachable a burst
        worker tries again until --give-up-after (False: it gave up) before it starts; a
        long-lived one starts and waits for it in its loop. Each attempt is bounded by
        netsafety's connect timeout (management/base.py)."""
        policy = ErrorPolicy(options.using)  # the worker loop's, before the worker starts
        while True:
            tried_at = time.monotonic()  # an outage starts with the attempt that failed
            try:
                self._check_database(options)
                return True
            except (OperationalError, InterfaceError) as exc:
                if not options.burst:
                    return True
                policy.failed(tried_at)
                now = time.monotonic()
                if policy.give_up_in(options.give_up_after, now) <= 0:
                    log_gave_up(now - (policy.down_since or tried_at), exc, options.give_up_after)
                    return False
                log_db_error(exc, policy.backoff)
                time.sleep(policy.backoff)
            except NotMigrated as exc:
                raise CommandError(str(exc)) from None
            finally:  # the worker opens its own, tagged with its name (application_name)
                connections[options.using].close()

    def _check_database(self, options: WorkerOptions) -> None:
        db.require_tables(options.using)
        for name in unknown_queues(options.queues or [], options.using):
            self.stderr.write(
                f"WARNING: --queues {name}: no handler, task, schedule, queue control or "
                f"pending job names the queue {name!r}; this worker only runs jobs enqueued "
                "there explicitly (is it a typo?)",
                style_func=self.style.WARNING,
            )
