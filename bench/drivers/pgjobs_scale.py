"""django-pgjobs measurements of bench/scale.py and bench/bloat.py that run inside the
package's environment (one JSON object on the last stdout line):

    heartbeat JOBS BATCH         claim JOBS pending jobs, renew each lease once, BATCH leases
                                 per statement (as a worker's heartbeat does), release
                                 -> {"statements", "rows", "seconds", "rate", "ms_p50", ...}
    cycles JOBS BATCH            claim, heartbeat, finalize BATCH jobs at a time on two databases
                                 in turn (BENCH_OTHER_DB) -> per database: time and rate of each
    pages REPS                   the admin's pages (changelist, filtered, a job, dashboard)
                                 with Django's test client, as a superuser -> {page: [ms, ...]}
    steady RATE SECONDS [TICK]   enqueue RATE jobs/s for SECONDS (enqueue_many every TICK s,
                                 default 0.02)
                                 -> {"n", "seconds", "behind_s"}
    health                       pgjobs_health's report and the dashboard's health entry
"""

import json
import os
import sys
import time
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here.parent / "pgjobs_bench"), str(here)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")

import django  # noqa: E402

django.setup()


def _pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p / 100)))] if v else 0.0


def heartbeat(jobs: int, batch: int) -> dict:
    """Claim ``jobs`` pending jobs, then renew each lease once, ``batch`` leases a statement
    (a worker renews the leases of the jobs it runs, every few seconds: a tight loop over the
    same rows would measure the dead versions it makes itself)."""
    from django_pgjobs import queries

    leases = []
    while len(leases) < jobs:
        got = queries.claim(
            worker_id="bench-heartbeat",
            types=["noop"],
            queues=None,
            limit=min(1000, jobs - len(leases)),
            lease_seconds=600,
        )
        if not got:
            break
        leases += [(r.id, r.lease_token) for r in got]
    times, rows = [], 0
    try:
        for i in range(0, len(leases), batch):
            t0 = time.perf_counter()
            rows += len(queries.heartbeat(leases[i : i + batch], 600))
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        for i in range(0, len(leases), 1000):
            queries.release(leases[i : i + 1000], reason="bench")
    total = sum(times) / 1000
    return {
        "jobs": len(leases),
        "statements": len(times),
        "rows": rows,
        "seconds": total,
        "rate": rows / total if total else 0.0,
        "ms_p50": _pct(times, 50),
        "ms_p99": _pct(times, 99),
    }


def cycles(jobs: int, batch: int) -> dict:
    """claim -> heartbeat -> finalize of ``batch`` jobs at a time, on the two databases in
    turn (DATABASE_URL and BENCH_OTHER_DB, aliases "default" and "other"), batch by batch,
    the order swapping every round: the two share every stretch of the machine's drift.
    Each database needs ``jobs`` pending noop jobs. Returns per alias the time of each step.
    BENCH_SWAP=1 swaps the two databases between the aliases (a check that the alias, its
    connection or its turn in the order does not favour one side)."""
    from django.db import connections

    from django_pgjobs import db, queries
    from django_pgjobs.queries import Completion

    _add_other_alias()
    for alias in ("default", "other"):  # plan once per connection, as a worker does
        db.use_generic_plans(alias)
    spent = {a: {"claim": [], "heartbeat": [], "finalize": []} for a in ("default", "other")}
    rows = dict.fromkeys(spent, 0)

    def one(alias: str) -> bool:
        t0 = time.perf_counter()
        got = queries.claim(
            worker_id="bench-cycles",
            types=["noop"],
            queues=None,
            limit=batch,
            lease_seconds=60,
            using=alias,
        )
        t1 = time.perf_counter()
        queries.heartbeat([(r.id, r.lease_token) for r in got], 60, using=alias)
        t2 = time.perf_counter()
        queries.finalize(
            [Completion(r.id, r.lease_token, r.attempts, "COMPLETED", duration_ms=1) for r in got],
            using=alias,
        )
        t3 = time.perf_counter()
        for step, dt in (("claim", t1 - t0), ("heartbeat", t2 - t1), ("finalize", t3 - t2)):
            spent[alias][step].append(dt)
        rows[alias] += len(got)
        return len(got) == batch

    k = 0
    while k * batch < jobs:
        order = ("default", "other") if k % 2 == 0 else ("other", "default")
        if not all([one(a) for a in order]):
            break
        k += 1
    for a in spent:
        connections[a].close()
    return {
        a: {
            "rows": rows[a],
            "batches": len(spent[a]["claim"]),
            **{f"{step}_s": sum(v) for step, v in spent[a].items()},
            **{f"{step}_ms_p50": _pct([x * 1000 for x in v], 50) for step, v in spent[a].items()},
            **{f"{step}_rate": rows[a] / sum(v) for step, v in spent[a].items() if sum(v)},
            "cycle_rate": rows[a] / sum(sum(v) for v in spent[a].values()),
        }
        for a in spent
    }


def _add_other_alias() -> None:
    from django.db import connections

    default = connections.databases["default"]
    other = dict(default, NAME=os.environ["BENCH_OTHER_DB"])
    if os.environ.get("BENCH_SWAP") == "1":
        other["NAME"], default["NAME"] = default["NAME"], other["NAME"]
    connections.databases["other"] = other


def pages(reps: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    from django_pgjobs.models import Job

    user_model = get_user_model()
    user = user_model.objects.filter(
        username="bench"
    ).first() or user_model.objects.create_superuser("bench", "bench@example.com", "bench")
    c = Client()
    c.force_login(user)
    some = Job.objects.order_by("id").values_list("id", flat=True)[:1][0]
    base = "/admin/django_pgjobs/job/"
    urls = {
        "changelist": base,
        "changelist_failed": base + "?state=FAILED",
        "changelist_completed": base + "?state=COMPLETED",
        "changelist_due": base + "?state=due",
        "changelist_type": base + "?type=email.send",
        "changelist_finished_24h": base + "?finished=24h",
        "changelist_type_tenant": base + "?type=report.build&tenant=tenant-7",
        "changelist_search": base + "?q=trace-123",
        "job": f"{base}{some}/change/",
        "dashboard": _dashboard_url(),
    }
    out: dict = {}
    for name, url in urls.items():
        if url is None:
            continue
        times, status = [], None
        for _ in range(reps):
            t0 = time.perf_counter()
            r = c.get(url)
            times.append((time.perf_counter() - t0) * 1000)
            status = r.status_code
        out[name] = {"url": url, "status": status, "ms": times, "ms_median": _pct(times, 50)}
    return out


def _dashboard_url() -> str | None:
    from django.urls import NoReverseMatch, reverse

    for name in ("admin:django_pgjobs_dashboard_changelist",):
        try:
            return reverse(name)
        except NoReverseMatch:
            continue
    return "/admin/django_pgjobs/job/dashboard/"


def steady(rate: float, seconds: float, tick: float = 0.02) -> dict:
    from django_pgjobs import enqueue_many

    per_tick = rate * tick
    n, owed = 0, 0.0
    t0 = time.monotonic()
    behind = 0.0
    k = 0
    while True:
        due = t0 + k * tick
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        else:
            behind = max(behind, now - due)
        owed += per_tick
        batch = int(owed)
        owed -= batch
        if batch:
            enqueue_many("noop", [{"i": n + i} for i in range(batch)], queue="default")
            n += batch
        k += 1
    return {"n": n, "seconds": time.monotonic() - t0, "behind_s": behind}


def health(snapshot_age: float) -> dict:
    """pgjobs_health's report and the dashboard's health data (the default thresholds, but
    for the snapshot age: the short soak holds its snapshot for less than the default)."""
    from django_pgjobs import dashboard, health_checks

    rep = health_checks.report(health_checks.Thresholds(max_snapshot_age=snapshot_age))
    dash = (
        dashboard.build()["health"]["old_snapshots"]
        if snapshot_age >= 60
        else health_checks.summary(health_checks.Thresholds(max_snapshot_age=snapshot_age))[
            "old_snapshots"
        ]
    )
    return {
        "healthy": rep["healthy"],
        "problems": rep["problems"],
        "held": rep["metrics"]["old_snapshots"],
        "dashboard": dash,
    }


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "heartbeat":
        res = heartbeat(int(args[0]), int(args[1]))
    elif cmd == "cycles":
        res = cycles(int(args[0]), int(args[1]))
    elif cmd == "pages":
        res = pages(int(args[0]))
    elif cmd == "steady":
        res = steady(float(args[0]), float(args[1]), *(float(x) for x in args[2:3]))
    elif cmd == "health":
        res = health(float(args[0]) if args else 60.0)
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    sys.stdout.write(json.dumps(res) + "\n")
