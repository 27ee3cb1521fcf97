"""A TCP proxy under the test's control, for hung-connection tests.

``TcpProxy(server.address)`` forwards ``127.0.0.1:<port>`` to the target. ``blackhole()``
keeps every connection open but silently drops what flows through it (a dead peer or a
stateful firewall that forgot the connection: no RST, no FIN), and refuses nothing, so a
client only notices with a keepalive or a timeout. ``heal()`` forwards again and closes
the black-holed connections, so clients reconnect.

Every socket is non-blocking and driven by one selector loop: what one side sends
waits in a buffer for the other (at most ``_BUFFER_CAP`` bytes, then that side is not
read until the buffer drains, as TCP's own flow control would do), so a peer that stops
reading holds up its own connection only.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Self

from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.options import parse_address
from liftbridge_sync.testing._lifecycle import Lifecycle

__all__ = ["TcpProxy"]

#: Bytes queued for one socket before the other side of its pair is no longer read.
_BUFFER_CAP = 4 << 20
#: How long :meth:`TcpProxy.close` waits for the proxy thread.
_JOIN_TIMEOUT = 5.0


class TcpProxy(Lifecycle):
    """Forward TCP connections to ``target``, with faults switched on and off at will.

    Args:
        target: ``host:port`` to forward to (resolved here, once).

    Attributes:
        address: ``127.0.0.1:<port>`` to give a client instead of ``target``.

    Raises:
        ConfigurationError: ``target`` is not ``host:port`` or its host does not resolve.

    Thread-safe: :meth:`blackhole`, :meth:`heal` and :meth:`close` may be called from
    any thread while the ``lbtest-proxy`` thread forwards.
    """

    def __init__(self, target: str) -> None:
        host, port = parse_address(target)
        try:
            # Resolved once here: the proxy thread must not wait on a name lookup.
            info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        except OSError as exc:
            raise ConfigurationError(f"TcpProxy target {target!r} does not resolve: {exc}") from exc
        self._family, self._target = info[0], info[4]
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        # Guards _blackholed, and _pairs against close() shutting sockets down while
        # the proxy thread closes them (a closed socket's descriptor may be reused).
        self._lock = threading.Lock()
        self._blackholed = False
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._out: dict[socket.socket, bytearray] = {}  # bytes waiting to be sent to it
        self._connecting: set[socket.socket] = set()
        self._ended: set[socket.socket] = set()  # sent EOF: its peer closes once flushed
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
        """Start forwarding on the ``lbtest-proxy`` thread (daemonic, ended by
        :meth:`close`)."""
        self._listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
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
        self._wake()

    def close(self) -> None:
        """Stop the thread and close every socket; returns once the thread has ended.

        Raises:
            RuntimeError: The thread did not end within 5 s (a :attr:`tap` callback
                that does not return); the sockets are closed all the same.
        """
        self._stop = True
        with self._lock:
            # Shut down first: whatever the thread is doing with them ends at once.
            for sock in [self._listener, *self._pairs]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._wake()
        thread = self._thread
        if thread is not None:
            thread.join(_JOIN_TIMEOUT)
        for sock in [self._listener, self._wake_r, self._wake_w, *self._pairs]:
            with contextlib.suppress(OSError):
                sock.close()
        self._pairs.clear()
        self._out.clear()
        self._selector.close()  # its epoll descriptor too
        if thread is not None and thread.is_alive():
            raise RuntimeError(f"the lbtest-proxy thread did not end within {_JOIN_TIMEOUT}s")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # closed, or full: a wake-up is pending anyway
            self._wake_w.send(b"x")

    # ------------------------------------------------------------------ proxy thread

    def _run(self) -> None:
        tainted: set[socket.socket] = set()  # saw traffic dropped: must not be trusted
        while not self._stop:
            for key, events in self._selector.select(timeout=0.5):
                if self._stop:
                    return
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                elif sock is self._wake_r:
                    with contextlib.suppress(OSError):
                        sock.recv(64)
                    with self._lock:
                        healed = not self._blackholed
                    if healed:
                        for stale in list(tainted):
                            self._drop(stale)
                        tainted.clear()
                else:
                    # An earlier event of this round may have dropped its pair.
                    if events & selectors.EVENT_WRITE and sock in self._pairs:
                        self._writable(sock)
                    if events & selectors.EVENT_READ and sock in self._pairs:
                        self._read(sock, tainted)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        upstream = socket.socket(self._family, socket.SOCK_STREAM)
        upstream.setblocking(False)
        # Not waited for here: what the client sends meanwhile waits in the buffer.
        code = upstream.connect_ex(self._target)
        if code not in (0, errno.EINPROGRESS):
            client.close()
            upstream.close()
            return
        client.setblocking(False)
        self.connections += 1
        self._numbers[client] = (self.connections, True)
        self._numbers[upstream] = (self.connections, False)
        with self._lock:
            self._pairs[client] = upstream
            self._pairs[upstream] = client
        self._out[client] = bytearray()
        self._out[upstream] = bytearray()
        if code != 0:
            self._connecting.add(upstream)
        self._watch(client)
        self._watch(upstream)

    def _watch(self, sock: socket.socket) -> None:
        """Register the events ``sock`` waits for now: readable while its peer's buffer
        has room (backpressure), writable while it has bytes to send or is connecting."""
        peer = self._pairs[sock]
        events = 0
        if sock not in self._ended and len(self._out[peer]) < _BUFFER_CAP:
            events |= selectors.EVENT_READ
        if self._out[sock] or sock in self._connecting:
            events |= selectors.EVENT_WRITE
        try:
            key = self._selector.get_key(sock)
        except KeyError:
            if events:
                self._selector.register(sock, events)
            return
        if not events:
            self._selector.unregister(sock)
        elif key.events != events:
            self._selector.modify(sock, events)

    def _read(self, sock: socket.socket, tainted: set[socket.socket]) -> None:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        peer = self._pairs[sock]
        if not data:
            if self._out[peer]:
                # What it sent before its EOF still goes through, then both close.
                self._ended.add(sock)
                self._watch(sock)
            else:
                self._drop(sock)
            return
        with self._lock:
            blackholed = self._blackholed
        if blackholed:
            tainted.add(sock)
            return
        if self.tap is not None:
            number, from_client = self._numbers[sock]
            self.tap(number, from_client, data)
        self._out[peer] += data
        self._send(peer)

    def _writable(self, sock: socket.socket) -> None:
        if sock in self._connecting:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self._drop(sock)  # refused: the client sees its connection closed
                return
            self._connecting.discard(sock)
        self._send(sock)

    def _send(self, sock: socket.socket) -> None:
        """Send what fits of ``sock``'s buffer now, never waiting."""
        buffer = self._out[sock]
        if buffer and sock not in self._connecting:
            try:
                sent = sock.send(buffer)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(sock)
                return
            del buffer[:sent]
        peer = self._pairs[sock]
        if not buffer and peer in self._ended:
            self._drop(sock)
            return
        self._watch(sock)
        self._watch(peer)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            peer = self._pairs.pop(sock, None)
            for one in (sock, peer):
                if one is None:
                    continue
                self._pairs.pop(one, None)
                self._numbers.pop(one, None)
                self._out.pop(one, None)
                self._connecting.discard(one)
                self._ended.discard(one)
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(one)
                with contextlib.suppress(OSError):
                    one.close()
