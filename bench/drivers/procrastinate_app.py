"""Procrastinate app for the benchmark (run in bench/.venvs/procrastinate).

Used the way procrastinate's quickstart shows: an App on a PsycopgConnector, a task
declared with @app.task, ``procrastinate --app=procrastinate_app.app worker`` as the
worker, ``task.defer()`` / ``task.batch_defer()`` from synchronous producer code.
The task is ``async`` (procrastinate runs sync tasks in a thread; a no-op coroutine is
its cheapest path).
"""

import os

import probe
from procrastinate import App, PsycopgConnector

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench_procrastinate")

app = App(connector=PsycopgConnector(conninfo=URL))


@app.task(name="noop", queue="default")
async def noop(i: int) -> None:
    probe.hit(i)
