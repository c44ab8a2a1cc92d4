"""Worker hosts for the partition tests: network namespaces joined to this host by veth pairs,
a cluster of their own listening on the veth addresses, runjobs started inside a namespace.

A silent cut (frames dropped, no reset): the neighbour entries of both ends are permanent and
get switched to a MAC address nobody has; healing switches them back. This kernel has no
nft/iptables/netem, and `ip link set down` is not silent (sends fail at once). Root only."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.acceptance.invariants import psycopg_query
from tests.conftest import ROOT, WorkerProcess, missing_requirement

sys.path.insert(0, str(ROOT / "scripts"))
from pgserver import EmbeddedPostgres  # noqa: E402

NOBODY = "02:00:5e:00:53:01"  # a locally administered MAC no interface here has


def ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)  # noqa: S603,S607
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def require_netns() -> None:
    if shutil.which("ip") is None:
        missing_requirement("iproute2 (the `ip` command)", "apt-get install iproute2")
    if os.geteuid() != 0:
        missing_requirement("root (network namespaces need it)", "run the suite as root")


class Host:
    """A namespace ``ns`` with one veth pair to this host: host_ip <-> ns_ip (a /30)."""

    def __init__(self, tag: str, subnet: tuple[int, int]):
        uid = f"{os.getpid() % 100000}{tag}"
        self.ns = f"pgjf{uid}"
        self.host_if, self.ns_if = f"pjh{uid}"[:15], f"pjn{uid}"[:15]
        self.host_ip, self.ns_ip = f"10.{subnet[0]}.{subnet[1]}.1", f"10.{subnet[0]}.{subnet[1]}.2"
        self._macs: tuple[str, str] | None = None

    def create(self) -> Host:
        ip("netns", "add", self.ns)
        ip(
            "link",
            "add",
            self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            self.ns_if,
            "netns",
            self.ns,
        )
        ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        ip("link", "set", self.host_if, "up")
        ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        ip("-n", self.ns, "link", "set", self.ns_if, "up")
        ip("-n", self.ns, "link", "set", "lo", "up")
        host_mac = Path(f"/sys/class/net/{self.host_if}/address").read_text().strip()
        ns_mac = ip("-n", self.ns, "-br", "link", "show", self.ns_if).split()[2]
        self._macs = (host_mac, ns_mac)
        self._neighbours(host_mac, ns_mac)
        return self

    def _neighbours(self, host_mac: str, ns_mac: str) -> None:
        """Permanent entries: no ARP that could fail or heal on its own."""
        ip(
            "neigh",
            "replace",
            self.ns_ip,
            "lladdr",
            ns_mac,
            "dev",
            self.host_if,
            "nud",
            "permanent",
        )
        ip(
            "-n",
            self.ns,
            "neigh",
            "replace",
            self.host_ip,
            "lladdr",
            host_mac,
            "dev",
            self.ns_if,
            "nud",
            "permanent",
        )

    def cut(self) -> None:
        """Frames both ways go to a MAC nobody has: dropped, no reset, no error."""
        self._neighbours(NOBODY, NOBODY)

    def heal(self) -> None:
        assert self._macs is not None
        self._neighbours(*self._macs)

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)  # noqa: S603,S607
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, check=False)  # noqa: S603,S607


def free_subnets(n: int) -> list[tuple[int, int]]:
    """n /30 subnets of 10.213.0.0/16 no interface of this host uses."""
    used = ip("-4", "-o", "addr")
    picks: list[tuple[int, int]] = []
    while len(picks) < n:
        third = random.randrange(0, 64) * 4  # noqa: S311
        subnet = (213, third)
        if f"10.213.{third}." not in used and subnet not in picks:
            picks.append(subnet)
    return picks


@contextmanager
def worker_hosts(n: int) -> Iterator[list[Host]]:
    """n namespaces, removed afterwards whatever happens."""
    require_netns()
    hosts = [Host(chr(ord("a") + i), s) for i, s in enumerate(free_subnets(n))]
    try:
        for h in hosts:
            h.create()
        yield hosts
    finally:
        for h in hosts:
            h.remove()


class Cluster:
    """A throwaway PostgreSQL listening on loopback and on the hosts' veth addresses."""

    def __init__(self, hosts: list[Host]):
        listen = ",".join(["127.0.0.1", *(h.host_ip for h in hosts)])
        self.pg = EmbeddedPostgres(
            max_connections=60, handle_signals=False, settings={"listen_addresses": listen}
        )
        self.hosts = hosts
        self.conn: psycopg.Connection | None = None

    def start(self) -> Cluster:
        self.pg.start()
        nets = "".join(f"host all all {h.ns_ip}/32 trust\n" for h in self.hosts)
        with (self.pg.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write(nets)
        self.query("SELECT pg_reload_conf()")
        migrate(self.pg.url)
        return self

    def url_from(self, host: Host) -> str:
        return f"postgres://postgres@{host.host_ip}:{self.pg.port}/{self.pg.database}"

    def query(self, statement: str, params: object = None) -> list[tuple]:
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.pg.url, autocommit=True)
        return psycopg_query(self.conn)(statement, params)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.pg.close()


def migrate(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url}
    env.pop("PGJOBS_TEST_DB_NAME", None)
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "migrate", "--settings", "tests.settings", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr


class HostWorker(WorkerProcess):
    """`manage.py runjobs` inside a namespace (``ip netns exec``), with its own settings."""

    def __init__(
        self,
        host: Host | None,
        url: str,
        *args: str,
        settings: str,
        env: dict[str, str] | None = None,
    ):
        self.args = list(args)
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "PGJOBS_TEST_DB_NAME": "",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        tmp = Path(os.environ.get("TMPDIR", "/tmp"))  # noqa: S108
        self.log_path = tmp / f"pgjobs-worker-{os.getpid()}-{id(self)}.log"
        self._log = open(self.log_path, "w+b")  # noqa: SIM115
        prefix = ["ip", "netns", "exec", host.ns] if host else []
        self.proc = subprocess.Popen(  # noqa: S603
            [*prefix, sys.executable, "-m", "django", "runjobs", "--settings", settings, *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
