"""The shop's background jobs. This module is discovered automatically (a `jobs.py` in an app)."""

import logging

from django.db import transaction

from django_pgjobs import Fail, handler

from .models import ImportedRow, Order

logger = logging.getLogger("shop")


@handler("send_receipt", max_attempts=3, queue="emails")
def send_receipt(job):
    """Pretends the mail server is down on the first attempt: the retry succeeds."""
    order = Order.objects.get(pk=job.config["order_id"])
    if job.attempts == 1:
        raise ConnectionError("SMTP server did not answer (the demo fails the first attempt)")
    logger.info("receipt sent to %s for order %s", order.customer, order.pk)
    Order.objects.filter(pk=order.pk).update(receipt_sent=True)
    return {"sent_to": order.customer}


@handler("csv_import", max_attempts=5, queue="imports")
def csv_import(job):
    """Imports rows; bad rows are reported per item and the job ends COMPLETED_WITH_ERRORS."""
    imported = 0
    for n, line in enumerate(job.config["lines"], start=1):
        sku, _, qty = line.partition(",")
        if not qty.strip().isdigit():
            job.add_item_error(item=n, error=f"bad quantity {qty!r}", line=line)
            continue
        with transaction.atomic():
            ImportedRow.objects.update_or_create(sku=sku, defaults={"quantity": int(qty)})
        imported += 1
    return {"rows": imported}


@handler("nightly_report", max_attempts=2)
def nightly_report(job):
    """Always fails: shows the dead-letter queue (FAILED after max_attempts)."""
    raise RuntimeError(f"report backend unavailable for {job.config['day']}")


@handler("archive_order", transactional=True)
def archive_order(job):
    """Writes in the completion's transaction: exactly-once effect."""
    Order.objects.filter(pk=job.config["order_id"]).update(archived=True)
    return {"archived": job.config["order_id"]}


@handler("refuse_coupon")
def refuse_coupon(job):
    raise Fail("coupon expired: no point retrying")


@handler("deliver_webhook", max_attempts=3, queue="webhooks", timeout=10)
async def deliver_webhook(job):
    """An `async def` handler: the worker's event loop runs hundreds of these at once
    (docs/async.md). POSTs the order event to the shop's webhook URL (the demo serves one);
    the first attempt gets a 503 from the demo's endpoint, so the retry delivers it."""
    import asyncio
    import json
    from urllib.parse import urlsplit

    url = urlsplit(job.config["url"])
    body = json.dumps({"event": "order.paid", "order_id": job.config["order_id"]}).encode()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(url.hostname, url.port), 5)
    try:
        writer.write(
            f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
    status = int(status_line.split()[1])
    if status >= 300:
        raise ConnectionError(f"webhook endpoint answered {status}")
    logger.info("webhook delivered for order %s (%s)", job.config["order_id"], status)
    return {"status": status}
