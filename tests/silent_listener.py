"""A TCP listener that accepts connections and never says anything, for fault tests."""

from __future__ import annotations

import socket
import threading

__all__ = ["SilentListener"]


class SilentListener:
    """A listener that accepts connections and never says anything (a hung process, a
    proxy with nothing behind it); with ``full=True`` it accepts none either: its
    backlog is full, so a client's SYN is dropped and its connect() waits. With
    ``tiny_window=True`` its connections have the smallest receive buffer the kernel
    allows, so that a few KiB the client writes fill it (and nothing is ever read)."""

    def __init__(self, *, full: bool = False, tiny_window: bool = False) -> None:
        self._server = socket.socket()
        if tiny_window:  # inherited by the accepted connections
            self._server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        self._server.bind(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if full:
            # A backlog of 0 queues one connection: ours fills it, and nobody accepts.
            self._server.listen(0)
            filler = socket.create_connection(self._server.getsockname(), timeout=5)
            self._held.append(filler)
        else:
            self._server.listen(16)
            self._thread = threading.Thread(target=self._accept, name="test-silent", daemon=True)
            self._thread.start()

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        self._server.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._server.close()
        for conn in self._held:
            conn.close()
