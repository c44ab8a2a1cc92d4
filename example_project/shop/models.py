from django.db import models


class Order(models.Model):
    customer = models.CharField(max_length=100)
    total_cents = models.IntegerField()
    receipt_sent = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Order #{self.pk} for {self.customer}"


class ImportedRow(models.Model):
    sku = models.CharField(max_length=50, unique=True)
    quantity = models.IntegerField()

    def __str__(self) -> str:
        return f"{self.sku} x {self.quantity}"
