"""Oban for Python (PyPI ``oban``): the benchmark's no-op worker. ``oban start`` finds it by
the dotted path stored in each job (``oban_app.Noop``; bench/drivers is on PYTHONPATH)."""

import probe
from oban import worker


@worker(queue="default")
class Noop:
    async def process(self, job):
        probe.hit(job.args.get("i", -1))
