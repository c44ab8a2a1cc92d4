"""An index on unique_key in every status, for enqueue_on_commit's once-per-key lookup.
Built CONCURRENTLY (so not in a transaction): enqueues and claims go on meanwhile."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_pgjobs", "0007_job_progress"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(unique_key__isnull=False),
                fields=["unique_key"],
                name="pgjobs_job_unique_key_idx",
            ),
        ),
    ]
