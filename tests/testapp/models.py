from django.db import models


class Execution(models.Model):
    """One row per handler run, written when the run starts: (job, attempt) is unique, so a job
    run twice under the same attempt number is caught by the database."""

    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    worker = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_id", "attempt"], name="execution_once_per_attempt")
        ]


class Effect(models.Model):
    """A business row written by a handler (to check side effects)."""

    job_id = models.BigIntegerField()
    value = models.CharField(max_length=255)
