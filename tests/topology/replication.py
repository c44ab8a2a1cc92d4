"""A primary and its synchronous streaming standby: two throwaway clusters of the same
binaries (scripts/pgserver.py), the standby made by pg_basebackup, promoted on demand."""

from __future__ import annotations

from pathlib import Path

import psycopg

from tests.conftest import eventually

from .netns import EmbeddedPostgres, migrate

STANDBY_NAME = "standby1"


class Standby(EmbeddedPostgres):
    """A standby of ``primary``: its data folder is a base backup instead of an initdb."""

    def __init__(self, primary: EmbeddedPostgres, **kwargs: object):
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.primary = primary
        self._created_db = True  # the primary's database came with the backup

    def _run(self, argv: list[str], *, as_server: bool, timeout: float) -> tuple[int, str]:
        if Path(argv[0]).name == "initdb":  # the cluster is a copy of the primary's
            p = self.primary
            argv = [
                self._bin("pg_basebackup"),
                "-D",
                str(self.data_dir),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",  # no spread checkpoint to wait for
                "-d",
                f"host={p.host} port={p.port} user={p.user} application_name={STANDBY_NAME}",
            ]
        return super()._run(argv, as_server=as_server, timeout=timeout)

    def promote(self) -> None:
        rc, out = self._run(
            [self._bin("pg_ctl"), "promote", "-D", str(self.data_dir), "-w", "-t", "60"],
            as_server=True,
            timeout=70,
        )
        assert rc == 0, out


def primary_and_standby() -> tuple[EmbeddedPostgres, Standby]:
    """A migrated primary, then its standby, then synchronous replication to it."""
    primary = EmbeddedPostgres(max_connections=60, handle_signals=False).start()
    try:
        migrate(primary.url)
        standby = Standby(primary, max_connections=60, handle_signals=False).start()
    except BaseException:
        primary.close()
        raise
    with psycopg.connect(primary.url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        conn.execute("SELECT pg_reload_conf()")
        eventually(
            lambda: (
                conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall() == [("sync",)]
            ),
            timeout=30,
            message="the standby is synchronous",
        )
    return primary, standby
