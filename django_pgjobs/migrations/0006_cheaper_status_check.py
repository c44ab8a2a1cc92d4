# Written by hand from what makemigrations (Django 6.1.3) generated on 2026-11-30: the same
# state operations, and SQL that swaps the constraint without a long lock.

from django.db import migrations, models

import django_pgjobs.models

# The same rule as before, in a form PostgreSQL checks faster (see models.TextIn).
NEW = (
    '"status"::text = ANY('
    "'{PENDING,RUNNING,COMPLETED,COMPLETED_WITH_ERRORS,FAILED,CANCELLED}'::text[])"
)
OLD = (
    "\"status\" IN ('PENDING', 'RUNNING', 'COMPLETED', 'COMPLETED_WITH_ERRORS', 'FAILED', "
    "'CANCELLED')"
)


def swap(condition: str) -> tuple[str, ...]:
    """Replace the constraint NOT VALID (a brief ACCESS EXCLUSIVE lock, no scan), then
    validate it: a scan of the table under a lock that lets workers and enqueues go on."""
    return (
        'ALTER TABLE "pgjobs_job" DROP CONSTRAINT "pgjobs_job_status_valid", '
        f'ADD CONSTRAINT "pgjobs_job_status_valid" CHECK ({condition}) NOT VALID',
        'ALTER TABLE "pgjobs_job" VALIDATE CONSTRAINT "pgjobs_job_status_valid"',
    )


class Migration(migrations.Migration):
    atomic = False  # each statement commits: the validation runs after the brief lock ends

    dependencies = [
        ("django_pgjobs", "0005_cheaper_queue_name_check"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(swap(NEW), reverse_sql=swap(OLD))],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="job",
                    name="pgjobs_job_status_valid",
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=django_pgjobs.models.TextIn(
                            "status",
                            [
                                "PENDING",
                                "RUNNING",
                                "COMPLETED",
                                "COMPLETED_WITH_ERRORS",
                                "FAILED",
                                "CANCELLED",
                            ],
                        ),
                        name="pgjobs_job_status_valid",
                    ),
                ),
            ],
        ),
    ]
