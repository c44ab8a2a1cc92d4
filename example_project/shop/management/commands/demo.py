"""manage.py demo: enqueue the shop's jobs, run a real worker until they are done, show the outcome."""

import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from django_pgjobs import JobStatus, enqueue, enqueue_many
from django_pgjobs.models import Job
from shop.models import ImportedRow, Order
from shop.tasks import order_summary

DEMO_TYPES = [
    "send_receipt",
    "csv_import",
    "nightly_report",
    "archive_order",
    "refuse_coupon",
    "deliver_webhook",
    "task:shop.tasks.order_summary",
]
EXPECTED = {
    "send_receipt": (JobStatus.COMPLETED, 2),
    "csv_import": (JobStatus.COMPLETED_WITH_ERRORS, 1),
    "nightly_report": (JobStatus.FAILED, 2),
    "archive_order": (JobStatus.COMPLETED, 1),
    "refuse_coupon": (JobStatus.FAILED, 1),
    "deliver_webhook": (JobStatus.COMPLETED, 2),  # async def, on the worker's event loop
}


class Command(BaseCommand):
    help = "Run the django-pgjobs demo end to end."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=60.0)

    def handle(self, *args, **opts):
        self._reset()
        hooks = _webhook_endpoint()
        try:
            ids = self._enqueue(f"http://127.0.0.1:{hooks.server_port}/hooks/orders")
            self._run_worker(ids, opts["timeout"])
        finally:
            hooks.shutdown()
        self._report(ids)

    def _reset(self):
        Job.objects.filter(type__in=DEMO_TYPES).delete()
        Order.objects.all().delete()
        ImportedRow.objects.all().delete()

    def _enqueue(self, webhook_url):
        say = self.stdout.write
        say(self.style.MIGRATE_HEADING("1. Enqueue, inside the business transaction"))
        with transaction.atomic():
            order = Order.objects.create(customer="ada@example.com", total_cents=4200)
            receipt = enqueue("send_receipt", {"order_id": order.pk}, trace_id="demo-trace-1")
        say(f"   order #{order.pk} and job #{receipt.id} committed together")

        try:
            with transaction.atomic():
                ghost = Order.objects.create(customer="ghost@example.com", total_cents=1)
                enqueue("send_receipt", {"order_id": ghost.pk})
                raise RuntimeError("payment declined")
        except RuntimeError:
            pass
        say(
            "   a second order rolled back: its job never existed "
            f"({Job.objects.filter(type='send_receipt').count()} send_receipt job in the table)"
        )

        imp = enqueue("csv_import", {"lines": ["A-1,3", "B-2,oops", "C-3,7"]}, tenant_id="acme")
        report = enqueue("nightly_report", {"day": "2026-11-28"})
        archive = enqueue("archive_order", {"order_id": order.pk}, run_after=timedelta(seconds=1))
        coupon = enqueue("refuse_coupon", {"code": "XMAS"})
        hook = enqueue(
            "deliver_webhook", {"order_id": order.pk, "url": webhook_url}, trace_id="demo-trace-1"
        )
        bulk = enqueue_many("csv_import", [{"lines": [f"S-{i},{i}"]} for i in range(20)])
        with transaction.atomic():  # Django's @task API, same queue, same transaction rules
            summary = order_summary.enqueue(order.pk)
        say(
            f"   + csv_import #{imp.id}, nightly_report #{report.id}, archive_order #{archive.id} "
            f"(in 1 s), refuse_coupon #{coupon.id}, deliver_webhook #{hook.id} (async def), "
            f"and {len(bulk)} csv_import jobs in one INSERT"
        )
        say(f"   + @task order_summary -> result {summary.id} ({summary.status})")
        return {
            "send_receipt": receipt.id,
            "csv_import": imp.id,
            "nightly_report": report.id,
            "archive_order": archive.id,
            "refuse_coupon": coupon.id,
            "deliver_webhook": hook.id,
            "bulk": bulk,
            "task": summary.id,
        }

    def _run_worker(self, ids, timeout):
        say = self.stdout.write
        say(self.style.MIGRATE_HEADING("2. Run `manage.py runjobs` until every job is done"))
        manage = Path(__file__).resolve().parents[3] / "manage.py"
        worker = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                str(manage),
                "runjobs",
                "--concurrency",
                "4",
                "--poll-interval",
                "0.5",
                "--shutdown-timeout",
                "10",
            ],
        )
        deadline = time.monotonic() + timeout
        try:
            while Job.objects.filter(
                type__in=DEMO_TYPES, status__in=[JobStatus.PENDING, JobStatus.RUNNING]
            ).exists():
                if time.monotonic() > deadline:
                    raise CommandError(f"jobs still pending after {timeout}s")
                if worker.poll() is not None:
                    raise CommandError(f"the worker exited early with code {worker.returncode}")
                time.sleep(0.2)
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
        say(f"   worker stopped on SIGTERM with exit code {code}")

    def _report(self, ids):
        say = self.stdout.write
        say(self.style.MIGRATE_HEADING("3. Outcome"))
        say(f"   {'id':>5}  {'type':<15} {'status':<22} {'tries':<6} {'ms':>5}  result / error")
        ok = True
        for job_type, (want_status, want_attempts) in EXPECTED.items():
            job = Job.objects.get(pk=ids[job_type])
            detail = job.result if job.status != JobStatus.FAILED else _last_line(job.error)
            say(
                f"   {job.id:>5}  {job.type:<15} {job.status:<22} {job.attempts}/{job.max_attempts:<4}"
                f" {job.duration_ms if job.duration_ms is not None else '-':>5}  {detail}"
            )
            if (job.status, job.attempts) != (want_status, want_attempts):
                ok = False
                say(self.style.ERROR(f"      expected {want_status} after {want_attempts} tries"))
        bulk_done = Job.objects.filter(pk__in=ids["bulk"], status=JobStatus.COMPLETED).count()
        say(f"   bulk csv_import: {bulk_done}/{len(ids['bulk'])} COMPLETED")
        result = order_summary.get_result(ids["task"])
        say(f"   @task order_summary: {result.status}, return value {result.return_value!r}")
        ok = ok and result.status == "SUCCESSFUL"
        order = Order.objects.get()
        say(
            f"   order: receipt_sent={order.receipt_sent}, archived={order.archived}; "
            f"{ImportedRow.objects.count()} rows imported"
        )
        ok = ok and bulk_done == len(ids["bulk"]) and order.receipt_sent and order.archived
        say(
            "   dead-letter queue: Job.objects.filter(status='FAILED') -> "
            f"{list(Job.objects.filter(type__in=DEMO_TYPES, status='FAILED').values_list('id', flat=True))}"
        )
        if not ok:
            raise CommandError("the demo did not end as expected")
        say(self.style.SUCCESS("Demo finished: every job ended as expected."))


def _last_line(text):
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _webhook_endpoint():
    """A local endpoint for deliver_webhook: 503 to the first POST, 204 after."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Hooks(BaseHTTPRequestHandler):
        seen = 0

        def do_POST(self):  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            Hooks.seen += 1
            self.send_response(503 if Hooks.seen == 1 else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
