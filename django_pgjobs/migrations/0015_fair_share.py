from django.db import migrations, models


class Migration(migrations.Migration):
    """Fair share's passes (stride scheduling), one row per (queue, flow key), written by the
    controlled claim of a queue declared with "fair" (docs/flow-control.md). A new, empty
    table: no rewrite, no lock on pgjobs_job."""

    dependencies = [
        ("django_pgjobs", "0014_worker_loop_lag"),
    ]

    operations = [
        migrations.CreateModel(
            name="Share",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=63)),
                ("tenant", models.CharField(blank=True, max_length=255)),
                ("pass_value", models.FloatField(db_column="pass")),
            ],
            options={
                "db_table": "pgjobs_share",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "tenant"), name="pgjobs_share_queue_tenant"
                    )
                ],
            },
        ),
    ]
