import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from django_pgjobs import enqueue

from .models import Order


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    """The order and its receipt job commit together (or neither exists)."""
    data = json.loads(request.body or b"{}")
    with transaction.atomic():
        order = Order.objects.create(
            customer=data.get("customer", "anon"), total_cents=int(data.get("total_cents", 0))
        )
        job = enqueue("send_receipt", {"order_id": order.pk})
    return JsonResponse({"order": order.pk, "job": job.id, "trace_id": job.trace_id})
