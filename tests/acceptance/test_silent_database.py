"""A database that accepts TCP and never answers (issue 26.1): every command gives up within a
bound with a clear message and a non-zero exit, instead of waiting for the kernel's hours."""

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.commands import manage

BOUND = 30.0  # seconds; CONNECT_TIMEOUT is 10 s, --give-up-after 5 s
HUNG = 45.0  # the subprocess timeout: a command still waiting then hangs


@pytest.fixture(scope="module")
def silent_url() -> Iterator[str]:
    """postgres:// URL of a server that accepts connections and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed at teardown
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"postgres://postgres@127.0.0.1:{server.getsockname()[1]}/silent"
    server.close()
    for conn in held:
        conn.close()


def run_bounded(*args: str, url: str):
    started = time.monotonic()
    done = manage(*args, url=url, timeout=HUNG)  # TimeoutExpired: it hung
    took = time.monotonic() - started
    assert took < BOUND, f"{args} took {took:.1f}s against a silent server"
    return done


def test_burst_worker_gives_up_on_a_silent_database(silent_url):
    done = run_bounded("runjobs", "--burst", "--give-up-after", "5", url=silent_url)
    assert done.returncode == 4, done.stderr[-3000:]
    assert "giving up" in done.stderr and "connection timeout expired" in done.stderr, done.stderr[
        -3000:
    ]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_health_reports_a_silent_database_unhealthy(silent_url, as_json):
    done = run_bounded("pgjobs_health", *(["--json"] if as_json else []), url=silent_url)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    if as_json:
        assert '"healthy": false' in done.stdout and "connection timeout expired" in done.stdout
    else:
        assert "UNHEALTHY: cannot reach database 'default'" in done.stderr, done.stderr


def test_stats_reports_a_silent_database_in_one_line(silent_url):
    done = run_bounded("pgjobs_stats", url=silent_url)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.startswith("ERROR: cannot reach database 'default'"), done.stderr[-3000:]
