"""Unique windows (pgjobs_unique), debounce (Job.debounce_key and its index of open jobs) and
aging (Job.base_priority). The new columns are nullable (no table rewrite); the debounce index
is built CONCURRENTLY (so not in a transaction): enqueues and claims go on meanwhile."""

from django.db import migrations, models

DEBOUNCE_INDEX = (
    'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "pgjobs_job_debounce_open" '
    'ON "pgjobs_job" ("type", "debounce_key") '
    'WHERE ("debounce_key" IS NOT NULL AND "status" = \'PENDING\' AND "history" = \'[]\'::jsonb)'
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_pgjobs", "0010_worker_lease_seconds"),
    ]

    operations = [
        migrations.CreateModel(
            name="UniqueWindow",
            fields=[
                ("key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("job_id", models.BigIntegerField(help_text="The job that opened the window.")),
                ("until", models.DateTimeField()),
            ],
            options={
                "db_table": "pgjobs_unique",
                "ordering": ["key"],
                "indexes": [models.Index(fields=["until"], name="pgjobs_unique_until_idx")],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="base_priority",
            field=models.SmallIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="debounce_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        fields=["type", "debounce_key"],
                        condition=models.Q(debounce_key__isnull=False)
                        & models.Q(status="PENDING")
                        & models.Q(history=[]),
                        name="pgjobs_job_debounce_open",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    DEBOUNCE_INDEX, reverse_sql='DROP INDEX IF EXISTS "pgjobs_job_debounce_open"'
                ),
            ],
        ),
    ]
