"""The support matrix's PostgreSQL 16 (issue 26.7): the pgserver wheel's binaries start a real
16 here, and `--ci --only` picks one of CI's legs with its CI scope."""

import sys

import psycopg

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import matrix  # noqa: E402
from pgserver import EmbeddedPostgres  # noqa: E402


def test_the_pgserver_wheel_starts_a_postgresql_16():
    with (
        EmbeddedPostgres(install=matrix.pg16_install(), handle_signals=False) as pg,
        psycopg.connect(pg.url, autocommit=True) as conn,
    ):
        assert conn.info.server_version // 10000 == 16


def test_ci_has_a_postgresql_16_leg_and_only_picks_it_with_its_scope():
    [leg], extra = matrix.legs(["--ci", "--only", "6.1/3.12/16", "--", "-x"])
    assert (leg.postgres, leg.paths, extra) == ("16", matrix.INTEGRATION, ["-x"])
    assert {leg.postgres for leg in matrix.legs([])[0]} == {"15", "16", "18"}
