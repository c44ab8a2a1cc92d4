"""bench/topology.py's jobs: one that does nothing, one that uses the database briefly."""

from django.db import connection

from django_pgjobs import handler


@handler("bench.noop")
def noop(job):
    return None


@handler("bench.touch")
def touch(job):
    with connection.cursor() as cur:
        cur.execute("SELECT pg_sleep(%s)", [job.config.get("seconds", 0.05)])
