"""Fixtures of the topology tests: a real PgBouncer (Debian's pgbouncer, scripts/pgbouncer.py)
in transaction mode with a pool of 3 server connections, in front of the suite's PostgreSQL.

    bouncer                 the running PgBouncer (one per test session)
    start_pooled(*args, documented=True, pgjobs={...})
                            a `runjobs` subprocess whose `default` database goes through it
    pooled                  the alias "pooled" in this process: the test database through it
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from tests.conftest import ROOT, WorkerProcess, missing_requirement

sys.path.insert(0, str(ROOT / "scripts"))
from pgbouncer import PgBouncer, find_pgbouncer  # noqa: E402

POOL_SIZE = 3


@pytest.fixture(scope="session")
def bouncer() -> Iterator[PgBouncer]:
    if find_pgbouncer() is None:
        missing_requirement("pgbouncer", "apt-get install -y pgbouncer")
    with PgBouncer(os.environ["DATABASE_URL"], pool_size=POOL_SIZE) as b:
        yield b


def pooled_env(
    bouncer: PgBouncer, *, documented: bool = True, pgjobs: dict | None = None
) -> dict[str, str]:
    """The environment of a process on tests.topology.settings. ``documented``: the settings
    docs/topology.md asks for behind a transaction pooler (DISABLE_SERVER_SIDE_CURSORS)."""
    return {
        "PGJOBS_TEST_BOUNCER_URL": bouncer.url_for(connection.settings_dict["NAME"]),
        "PGJOBS_TEST_DISABLE_SSC": "1" if documented else "",
        "PGJOBS_TEST_PGJOBS": json.dumps(pgjobs or {}),
    }


@pytest.fixture
def start_pooled(bouncer, start_worker) -> Callable[..., WorkerProcess]:
    def start(
        *args: str,
        documented: bool = True,
        pgjobs: dict | None = None,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        full_env = {**pooled_env(bouncer, documented=documented, pgjobs=pgjobs), **(env or {})}
        return start_worker("--settings", "tests.topology.settings", *args, env=full_env)

    return start


@pytest.fixture
def pooled(bouncer, transactional_db) -> Iterator[str]:
    """The alias "pooled": this test's database through PgBouncer, for this test only (added
    after pytest-django's setup, so the flush goes through `default`)."""
    connections.settings["pooled"] = {
        **connection.settings_dict,
        "HOST": "127.0.0.1",
        "PORT": str(bouncer.port),
        "DISABLE_SERVER_SIDE_CURSORS": True,
        "TEST": {},
    }
    _declare_to_the_test_guard("pooled")
    try:
        yield "pooled"
    finally:
        connections["pooled"].close()
        if hasattr(connections._connections, "pooled"):
            delattr(connections._connections, "pooled")
        del connections.settings["pooled"]


def _declare_to_the_test_guard(alias: str) -> None:
    """Django's test case refuses connections to aliases it was not told of (its `databases`),
    in every thread; pytest-django fixed that set before this fixture ran. The test case class
    is reachable only through the guard it installed (a closure): add the alias there."""
    guard = BaseDatabaseWrapper.ensure_connection
    for cell in getattr(guard, "__closure__", None) or ():
        owner = cell.cell_contents
        if isinstance(owner, type) and isinstance(getattr(owner, "databases", None), frozenset):
            owner.databases = owner.databases | {alias}
            return
    raise AssertionError("Django's test guard changed: find another way to declare the alias")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of this tier is a topology test (`-m topology` selects them, `-m "not
    topology"` leaves them out), whatever its file says."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.topology)
