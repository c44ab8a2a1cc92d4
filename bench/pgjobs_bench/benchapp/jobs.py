"""The benchmark's no-op job: records its start in the shared probe and returns."""

import probe

from django_pgjobs import handler


@handler("noop")
def noop(job):
    probe.hit(job.config.get("i", -1))
