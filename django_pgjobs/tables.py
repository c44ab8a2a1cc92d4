"""Table names, importable before the app registry is ready (queries.py needs no model)."""

JOB_TABLE = "pgjobs_job"
WORKER_TABLE = "pgjobs_worker"
