"""A Django `@task` (django.tasks) running on django-pgjobs: the other API, same engine."""

from django.tasks import task

from .models import Order


@task(queue_name="emails", priority=10, max_attempts=3)
def order_summary(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    return f"order #{order.pk}: {order.total_cents / 100:.2f} EUR for {order.customer}"
