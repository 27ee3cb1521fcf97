"""A TCP proxy under the test's control, for hung-connection tests.

``TcpProxy(server.address)`` forwards ``127.0.0.1:<port>`` to the target. ``blackhole()``
keeps every connection open but silently drops what flows through it (a dead peer or a
stateful firewall that forgot the connection: no RST, no FIN), and refuses nothing, so a
client only notices with a keepalive or a timeout. ``heal()`` forwards again and closes
the black-holed connections, so clients reconnect.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Self

from liftbridge_sync.options import parse_address
from liftbridge_sync.testing._lifecycle import Lifecycle

__all__ = ["TcpProxy"]


class TcpProxy(Lifecycle):
    """Forward TCP connections to ``target``, with faults switched on and off at will.

    Args:
        target: ``host:port`` to forward to.

    Attributes:
        address: ``127.0.0.1:<port>`` to give a client instead of ``target``.

    Thread-safe: :meth:`blackhole` and :meth:`heal` may be called from any thread while
    the ``lbtest-proxy`` thread forwards.
    """

    def __init__(self, target: str) -> None:
        self._target = parse_address(target)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._blackholed = False
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.connections = 0
        #: Called on the proxy's thread with ``(connection number, from the client,
        #: bytes)`` for everything forwarded (to watch the traffic); set before start.
        self.tap: Callable[[int, bool, bytes], None] | None = None
        self._numbers: dict[socket.socket, tuple[int, bool]] = {}

    def start(self) -> Self:
        """Start forwarding on the ``lbtest-proxy`` thread."""
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="lbtest-proxy", daemon=True)
        self._thread.start()
        return self

    def blackhole(self) -> None:
        """Drop all traffic from now on, keeping connections open (accepting new ones)."""
        with self._lock:
            self._blackholed = True

    def heal(self) -> None:
        """Forward again; connections opened or used while black-holed are closed."""
        with self._lock:
            self._blackholed = False
        self._wake_w.send(b"h")

    def close(self) -> None:
        """Stop the thread and close every socket."""
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(5)
        for sock in [self._listener, self._wake_r, self._wake_w, *self._pairs]:
            with contextlib.suppress(OSError):
                sock.close()
        self._pairs.clear()
        self._selector.close()  # its epoll descriptor too

    # ------------------------------------------------------------------ proxy thread

    def _run(self) -> None:
        tainted: set[socket.socket] = set()  # saw traffic dropped: must not be trusted
        while not self._stop:
            for key, _ in self._selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                elif sock is self._wake_r:
                    sock.recv(64)
                    with self._lock:
                        healed = not self._blackholed
                    if healed:
                        for stale in list(tainted):
                            self._drop(stale)
                        tainted.clear()
                else:
                    self._forward(sock, tainted)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            client.close()
            return
        self.connections += 1
        self._numbers[client] = (self.connections, True)
        self._numbers[upstream] = (self.connections, False)
        for sock in (client, upstream):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
        self._pairs[client] = upstream
        self._pairs[upstream] = client

    def _forward(self, sock: socket.socket, tainted: set[socket.socket]) -> None:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
            return
        with self._lock:
            blackholed = self._blackholed
        if blackholed:
            tainted.add(sock)
            return
        peer = self._pairs.get(sock)
        if peer is None:
            return
        if self.tap is not None:
            number, from_client = self._numbers[sock]
            self.tap(number, from_client, data)
        try:
            peer.setblocking(True)
            peer.sendall(data)
            peer.setblocking(False)
        except OSError:
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        peer = self._pairs.pop(sock, None)
        for one in (sock, peer):
            if one is None:
                continue
            self._pairs.pop(one, None)
            self._numbers.pop(one, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(one)
            with contextlib.suppress(OSError):
                one.close()
