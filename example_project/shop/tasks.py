"""A Django `@task` running on django-pgjobs: the other API, same engine. (In a project on
Django 6.x only, `from django.tasks import task`; tasks_api also finds the 5.2 backport.)"""

from django_pgjobs.tasks_api import task

from .models import Order


@task(queue_name="emails", priority=10, max_attempts=3)
def order_summary(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    return f"order #{order.pk}: {order.total_cents / 100:.2f} EUR for {order.customer}"
