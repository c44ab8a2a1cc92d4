"""Issue 30's fit check: every admin page, seeded as an operator meets it (seven queues, one
paused, one limited, long type names, long errors, cron schedules in a time zone, running jobs
with progress, a job retried by hand), at 1440×900, 1024×768 and 390×844 in light and dark mode.
Screenshots go to test-artifacts/screenshots/fit/ (PGJOBS_SHOTS_TAG=after: .../after/); the
checks are checks.js's with the per-page options below: no sideways page scroll, identifiers
that never break mid-word, important columns not clipped by a scroll box."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from django.urls import reverse

from django_pgjobs import rollup
from django_pgjobs.sql import queues, rollups
from tests.browser.conftest import SHOTS
from tests.browser.test_pages_browser import CHECKS, login, seed_workflow
from tests.conftest import sql
from tests.support.admin import make_job
from tests.support.schedules import entry, schedules  # noqa: F401

UTC = timezone.utc  # datetime.UTC is Python >= 3.11
SIZES = ((1440, 900), (1024, 768), (390, 844))
QUEUES = (
    "default",
    "mail",
    "reports",
    "billing-invoices-eu-west",
    "notifications",
    "webhooks-outbound",
    "exports",
)
PDF, CSV = (
    "billing.invoices.generate_monthly_invoice_pdf",
    "billing.invoices.generate_monthly_invoice_csv",
)
WORKER = "vm-prod-eu-west-4402:4402:e540ea7c"
EXC_TB = (
    'Traceback (most recent call last):\n  File "/app/billing/jobs.py", line 88, in run\n'
    "    raise PaymentProviderError(msg)\n"
    "django_pgjobs.exceptions.PaymentProviderError: Payment provider rejected the charge "
    "for invoice INV-2026-004211 of tenant acme-industries: card expired (code 51)\n"
)


def _rollup(now: datetime) -> None:
    rec = rollup.Recorder()
    for minute in range(180):
        at = now.timestamp() - 60 * minute
        for i, q in enumerate(QUEUES):
            if minute % (i + 1) == 0:
                rec.record(q, PDF if i % 2 else "test.behave", "completed", 40 + 30 * i, at=at)
        if minute % 7 == 0:
            rec.record("mail", "test.echo", "failed", 900, at=at)
        if minute % 13 == 0:
            rec.record("billing-invoices-eu-west", CSV, "retried", 0, at=at)
    rec.flush()


def seed(schedules) -> dict[str, int]:  # noqa: F811
    now = datetime.now(UTC)
    earlier = now - timedelta(minutes=12)
    _rollup(now)
    for ms in (0, 40, 60, 80):
        make_job("COMPLETED", duration_ms=ms)
    make_job("COMPLETED", type=CSV, duration_ms=95_000, queue="billing-invoices-eu-west")
    queues.set_queue_paused("mail", True)
    queues.set_queue_limit("reports", 1)
    for q in QUEUES:
        for _ in range(2):
            make_job(queue=q, type=PDF, run_after=now - timedelta(seconds=40))
    make_job(type=CSV, run_after=now + timedelta(minutes=42), queue="billing-invoices-eu-west")
    running = make_job(
        "RUNNING",
        type="reports.quarterly_summary_for_all_tenants_and_regions",
        queue="reports",
        started_at=now - timedelta(seconds=95),
        created_at=earlier,
        run_after=earlier,
        locked_by=WORKER,
        progress={"done": 196, "total": 900, "note": "tenants rendered", "at": now.isoformat()},
    )
    make_job(
        "RUNNING",
        type=PDF,
        queue="billing-invoices-eu-west",
        locked_by=WORKER,
        started_at=now - timedelta(seconds=30),
        progress={"done": 69, "at": now.isoformat()},
    )
    sql(
        "INSERT INTO pgjobs_worker (worker_id, hostname, pid, queues, concurrency) VALUES "
        f"('{WORKER}', 'vm-prod-eu-west-4402', 4402, "
        '\'["default", "mail", "reports", "billing-invoices-eu-west"]\', 8)'
    )
    rollups.sample_depth()
    failed = None
    for i, typ in enumerate((PDF, CSV, PDF)):
        failed = make_job(
            "FAILED",
            type=typ,
            queue="billing-invoices-eu-west",
            error=EXC_TB,
            duration_ms=0 if i == 0 else 1500,
            history=[
                {
                    "attempt": 1,
                    "worker": WORKER,
                    "outcome": "retry",
                    "duration_ms": 300,
                    "error": "TimeoutError: upstream",
                    "started_at": (now - timedelta(minutes=3)).isoformat(),
                }
            ],
        )
    retried = make_job(
        "COMPLETED",
        type=PDF,
        attempts=1,
        locked_by=WORKER,
        started_at=now - timedelta(seconds=4),
        duration_ms=1200,
        history=[
            {
                "attempt": 1,
                "worker": WORKER,
                "outcome": "retry",
                "duration_ms": 20,
                "error": "TimeoutError: upstream",
                "started_at": (now - timedelta(minutes=9)).isoformat(),
            },
            {
                "attempt": 2,
                "worker": WORKER,
                "outcome": "attempts_exhausted",
                "duration_ms": 25,
                "error": "TimeoutError: upstream",
                "started_at": (now - timedelta(minutes=8)).isoformat(),
            },
            {
                "outcome": "manual_retry",
                "previous_status": "FAILED",
                "attempt": 2,
                "by": "admin:ops",
                "at": (now - timedelta(minutes=1)).isoformat(),
            },
        ],
    )
    schedules(
        nightly_billing_report=entry(cron="0 3 * * *", timezone="Europe/Paris", catch_up="latest"),
        every_minute=entry(),
    )
    from django_pgjobs.scheduler import enqueue_due

    enqueue_due(now=now)
    return {
        "workflow": seed_workflow(),
        "failed": failed.id,
        "running": running.id,
        "retried": retried.id,
    }


NO_CUT = [
    "#result_list td.field-type_col a",
    "#result_list td.field-type_col .pgjobs-sub",
    "#result_list td.field-when_col",
    "#result_list .pgjobs-progress-text",
]
OPTIONS = {
    "dashboard": {
        "noCut": [".pgjobs-bar-label"],
        "maxLines": {
            "#pgjobs-running tbody td:first-child": 2,
            "#pgjobs-queues tbody td:first-child": 1,
        },
    },
    "jobs": {"noCut": NO_CUT},
    "jobs-failed": {"noCut": NO_CUT},
    "schedules": {"maxLines": {"#result_list td.field-cron": 2}},
}


def pages(ids: dict[str, int]) -> list[tuple[str, str]]:
    job = "/admin/django_pgjobs/job/"
    return [
        ("dashboard", reverse("admin:django_pgjobs_dashboard_changelist") + "?refresh=0"),
        ("jobs", job),
        ("jobs-failed", job + "?state=FAILED"),
        ("job-failed", f"{job}{ids['failed']}/change/"),
        ("job-running", f"{job}{ids['running']}/change/"),
        ("job-retried", f"{job}{ids['retried']}/change/"),
        ("queues", reverse("admin:django_pgjobs_queue_changelist")),
        ("schedules", reverse("admin:django_pgjobs_schedule_changelist")),
        ("workflow", reverse("admin:django_pgjobs_workflow", args=[ids["workflow"]])),
        ("history", f"{job}{ids['failed']}/history/"),
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_fits_at_three_sizes(
    admin_static,
    browser,
    live_server,
    transactional_db,
    monkeypatch,
    schedules,  # noqa: F811 - the fixture
    scheme,
):
    from django.contrib.auth.models import User

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    User.objects.create_superuser("ops", "ops@example.com", "secret-pw")
    shots = SHOTS / os.environ.get("PGJOBS_SHOTS_TAG", "fit")
    shots.mkdir(parents=True, exist_ok=True)
    ids = seed(schedules)
    problems = []
    for width, height in SIZES:
        context = browser.new_context(
            viewport={"width": width, "height": height}, color_scheme=scheme
        )
        pg = context.new_page()
        pg.set_default_timeout(15_000)
        login(pg, live_server.url)
        for name, url in pages(ids):
            pg.goto(live_server.url + url)
            pg.screenshot(path=str(shots / f"{name}-{width}x{height}-{scheme}.png"), full_page=True)
            found = pg.evaluate(CHECKS, OPTIONS.get(name, {}))
            problems += [f"{name} {width}x{height} {scheme}: {p}" for p in found]
        context.close()
    assert not problems, "\n".join(problems)
