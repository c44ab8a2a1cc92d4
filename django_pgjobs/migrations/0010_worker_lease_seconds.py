from django.db import migrations, models


class Migration(migrations.Migration):
    """Each worker records its own lease: it is alive while it beats within a few of them.
    Nullable (no table rewrite); rows of older workers count with the LEASE_SECONDS setting."""

    dependencies = [
        ("django_pgjobs", "0009_prune_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="lease_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
