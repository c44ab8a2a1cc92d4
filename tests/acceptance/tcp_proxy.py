"""A TCP proxy in front of the test database: stop() makes it unreachable at once (the links
cut, new connections refused), the way a failed-over or firewalled server looks to a worker."""

from __future__ import annotations

import socket
import threading

from django.db import connection


class TcpProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._links: list[socket.socket] = []
        self._lock = threading.Lock()
        self.stopped = False
        self.frozen = False
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def to_test_database(cls) -> TcpProxy:
        s = connection.settings_dict
        return cls(s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432))

    def url(self) -> str:
        """DATABASE_URL through the proxy (tests/settings.py; the name: PGJOBS_TEST_DB_NAME)."""
        s = connection.settings_dict
        password = f":{s['PASSWORD']}" if s["PASSWORD"] else ""
        return f"postgres://{s['USER']}{password}@127.0.0.1:{self.port}/{s['NAME']}"

    def stop(self) -> None:
        self.stopped = True
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone does not
        except OSError:
            pass
        self.server.close()
        with self._lock:
            links, self._links = self._links, []
        for sock in links:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def freeze(self) -> None:
        """The database goes silent: links stay open, nothing more passes either way, new
        connections are accepted and never answered (a hung server, a half-open link)."""
        self.frozen = True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # stopped
                return
            if self.stopped:
                client.close()
                return
            if self.frozen:
                with self._lock:
                    self._links.append(client)
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._links += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.frozen:
                    dst.sendall(data)
        except OSError:
            pass
        _shut(src, dst)


def _shut(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
