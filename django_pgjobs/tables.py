"""Table names, importable before the app registry is ready (queries.py needs no model)."""

JOB_TABLE = "pgjobs_job"
WORKER_TABLE = "pgjobs_worker"
QUEUE_TABLE = "pgjobs_queue"
SCHEDULE_TABLE = "pgjobs_schedule"
SCHEDULE_FIRE_TABLE = "pgjobs_schedule_fire"
STAT_MINUTE_TABLE = "pgjobs_stat_minute"
DEPTH_SAMPLE_TABLE = "pgjobs_depth_sample"
