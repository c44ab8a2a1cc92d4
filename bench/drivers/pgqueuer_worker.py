"""Start a PgQueuer worker exactly as ``pgq run pgqueuer_app:main`` does.

``pgq run`` itself crashes at start-up in pgqueuer 1.6.0 with typer >= 0.2x ("'str'
object has no attribute 'name'" in setup_fancy_logger: typer no longer turns the
--log-level string into the LogLevel enum), so this calls the same entry point the CLI
calls, ``pgqueuer.run`` (= ``pgqueuer.adapters.cli.supervisor.run``), with the CLI's defaults
(batch size 10, dequeue timeout 30 s, unlimited concurrency).

    python pgqueuer_worker.py [--drain]      # --drain = QueueExecutionMode.drain (burst)
"""

import asyncio
import sys

import pgqueuer
from pgqueuer.core import logconfig
from pgqueuer.domain import types

if __name__ == "__main__":
    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    mode = (
        types.QueueExecutionMode.drain
        if "--drain" in sys.argv
        else types.QueueExecutionMode.continuous
    )
    asyncio.run(pgqueuer.run("pgqueuer_app:main", mode=mode))
