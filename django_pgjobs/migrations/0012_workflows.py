# Written by hand from what makemigrations (Django 6.1.3) generated on 2026-12-03: the same state
# operations; the status CHECK is swapped as in 0006 and the job index built concurrently, so
# that workers and enqueues go on while it runs.

import django.db.models.functions.datetime
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import django_pgjobs.models

STATUSES = [
    "WAITING",
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "COMPLETED_WITH_ERRORS",
    "FAILED",
    "CANCELLED",
]
NEW = '"status"::text = ANY(\'{' + ",".join(STATUSES) + "}'::text[])"
OLD = '"status"::text = ANY(\'{' + ",".join(STATUSES[1:]) + "}'::text[])"


def swap(condition: str) -> tuple[str, ...]:
    """Replace the constraint NOT VALID (a brief lock, no scan), then validate it under a lock
    that lets workers and enqueues go on (as 0006)."""
    return (
        'ALTER TABLE "pgjobs_job" DROP CONSTRAINT "pgjobs_job_status_valid", '
        f'ADD CONSTRAINT "pgjobs_job_status_valid" CHECK ({condition}) NOT VALID',
        'ALTER TABLE "pgjobs_job" VALIDATE CONSTRAINT "pgjobs_job_status_valid"',
    )


class Migration(migrations.Migration):
    atomic = False  # the CHECK's validation and the concurrent index each commit on their own

    dependencies = [
        ("django_pgjobs", "0011_unique_debounce"),
    ]

    operations = [
        migrations.CreateModel(
            name="Dependency",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "parent_id",
                        "child_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("parent_id", models.BigIntegerField()),
                ("child_id", models.BigIntegerField()),
                ("mode", models.CharField(max_length=16)),
                ("outcome", models.CharField(blank=True, max_length=32, null=True)),
            ],
            options={"db_table": "pgjobs_dependency"},
        ),
        migrations.CreateModel(
            name="Workflow",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=255)),
                (
                    "on_failure",
                    models.CharField(db_default="cancel", default="cancel", max_length=16),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={"db_table": "pgjobs_workflow", "ordering": ["-id"]},
        ),
        migrations.AddField(
            model_name="job",
            name="deps_failed",
            field=models.IntegerField(db_default=0, default=0, help_text="Dependencies failed."),
        ),
        migrations.AddField(
            model_name="job",
            name="deps_open",
            field=models.IntegerField(db_default=0, default=0, help_text="Dependencies not ended."),
        ),
        migrations.AddField(
            model_name="job",
            name="has_dependants",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="job",
            name="step",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="workflow_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("WAITING", "Waiting"),
                    ("PENDING", "Pending"),
                    ("RUNNING", "Running"),
                    ("COMPLETED", "Completed"),
                    ("COMPLETED_WITH_ERRORS", "Completed with errors"),
                    ("FAILED", "Failed"),
                    ("CANCELLED", "Cancelled"),
                ],
                db_default="PENDING",
                default="PENDING",
                max_length=32,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(swap(NEW), reverse_sql=swap(OLD))],
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="pgjobs_job_status_valid"),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=django_pgjobs.models.TextIn("status", STATUSES),
                        name="pgjobs_job_status_valid",
                    ),
                ),
            ],
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("workflow_id__isnull", False)),
                fields=["workflow_id", "step"],
                name="pgjobs_job_workflow_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(fields=["child_id"], name="pgjobs_dependency_child_idx"),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(
                condition=models.Q(("outcome__isnull", True)),
                fields=["parent_id"],
                name="pgjobs_dependency_open_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.CheckConstraint(
                condition=models.Q(("mode__in", ("success", "failure", "complete"))),
                name="pgjobs_dependency_mode",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflow",
            constraint=models.CheckConstraint(
                condition=models.Q(("on_failure__in", ("cancel", "continue", "ignore"))),
                name="pgjobs_workflow_on_failure",
            ),
        ),
    ]
