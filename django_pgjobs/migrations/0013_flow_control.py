from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    """Flow control (docs/flow-control.md): a job's flow key, a queue's per-key limit and rate,
    the rates' state. Nullable columns (no table rewrite); indexes built CONCURRENTLY."""

    atomic = False

    dependencies = [
        ("django_pgjobs", "0012_workflows"),
    ]

    operations = [
        migrations.CreateModel(
            name="Rate",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=63)),
                ("key", models.CharField(blank=True, max_length=255)),
                ("tat", models.DateTimeField()),
            ],
            options={
                "db_table": "pgjobs_rate",
            },
        ),
        migrations.AddField(
            model_name="job",
            name="flow_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="queue",
            name="burst",
            field=models.IntegerField(
                blank=True,
                help_text="Starts allowed at once above the rate (default 1).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="per_key_limit",
            field=models.IntegerField(
                blank=True, help_text="At most this many RUNNING jobs per flow key.", null=True
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="rate",
            field=models.FloatField(
                blank=True, help_text="Starts per second (one token per claimed job).", null=True
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="rate_per_key",
            field=models.BooleanField(
                blank=True, help_text="The rate applies to each flow key on its own.", null=True
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                models.F("queue"),
                models.F("flow_key"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("run_after"),
                models.F("id"),
                condition=models.Q(("flow_key__isnull", False), ("status", "PENDING")),
                name="pgjobs_job_flow_pending_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                models.F("queue"),
                models.F("flow_key"),
                condition=models.Q(("flow_key__isnull", False), ("status", "RUNNING")),
                name="pgjobs_job_flow_running_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="queue",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("per_key_limit__isnull", True), ("per_key_limit__gte", 1), _connector="OR"
                ),
                name="pgjobs_queue_per_key_gte_1",
            ),
        ),
        migrations.AddConstraint(
            model_name="queue",
            constraint=models.CheckConstraint(
                condition=models.Q(("rate__isnull", True), ("rate__gt", 0), _connector="OR"),
                name="pgjobs_queue_rate_gt_0",
            ),
        ),
        migrations.AddConstraint(
            model_name="queue",
            constraint=models.CheckConstraint(
                condition=models.Q(("burst__isnull", True), ("burst__gte", 1), _connector="OR"),
                name="pgjobs_queue_burst_gte_1",
            ),
        ),
        migrations.AddConstraint(
            model_name="rate",
            constraint=models.UniqueConstraint(
                fields=("queue", "key"), name="pgjobs_rate_queue_key"
            ),
        ),
    ]
