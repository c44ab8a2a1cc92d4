from django.db import migrations, models


class Migration(migrations.Migration):
    """Each worker writes the worst lag of its event loop with its heartbeat, for pgjobs_health.
    Nullable (no table rewrite): workers without async handlers leave it empty."""

    dependencies = [
        ("django_pgjobs", "0013_flow_control"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="loop_lag_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
