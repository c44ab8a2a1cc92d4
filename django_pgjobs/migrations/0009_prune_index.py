from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    """Built CONCURRENTLY: enqueues and finalizes go on while it is built on a big table."""

    atomic = False

    dependencies = [
        ("django_pgjobs", "0008_job_unique_key_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ["FAILED", "COMPLETED_WITH_ERRORS", "CANCELLED"])
                ),
                fields=["status", "finished_at"],
                name="pgjobs_job_prune_idx",
            ),
        ),
    ]
