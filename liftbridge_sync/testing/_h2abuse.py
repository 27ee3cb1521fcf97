"""An HTTP/2-aware proxy that makes a broker misbehave at the framing level.

:class:`FakeBroker` is a grpcio server, so everything it sends is well-formed HTTP/2.
``H2Abuser(broker.address)`` forwards connections to it whole frame by whole frame
(broker to client) and byte for byte (client to broker), and on command, for the
connections open at that moment:

* :meth:`flood` sends PING (or empty SETTINGS) frames as fast as it can, up to a byte
  budget, while reading nothing the client sends (the 1.4 GiB-in-3-s abuse);
* :meth:`send_frame` sends raw bytes between two frames (an oversize frame header, a
  DATA frame the window does not allow);
* :meth:`stall` stops reading from the client and forwarding to it (a broker that
  stopped: SIGSTOP, a full disk, a black hole that still ACKs at the TCP level).

Connections accepted afterwards are forwarded cleanly, but after :meth:`goaway_new`:
each then gets a graceful GOAWAY after the broker's first frame, and nothing more from
the broker (one that says goodbye at once and never ends its calls). A broker advertising the
proxy's port (``FakeBroker(advertised_port=abuser.port)``) routes a client's publish and
subscribe connections (to the partition leader) through it. Thread-safe: commands may
come from any thread while ``lbtest-h2abuse`` threads forward.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Self

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.options import parse_address
from liftbridge_sync.testing._lifecycle import Lifecycle

__all__ = ["H2Abuser"]

_HEADER = struct.Struct(">IBI")
#: GOAWAY(NO_ERROR) whose last stream id covers every stream: a graceful shutdown.
_GOAWAY_ALL = _HEADER.pack(8 << 8 | 7, 0, 0) + struct.pack(">II", 0x7FFFFFFF, 0)


class _Link:
    """One proxied connection: the client's socket, the broker's, and its faults."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.write_lock = threading.Lock()  # whole frames to the client
        self.reading = threading.Event()  # client → broker forwarding allowed
        self.reading.set()
        self.forwarding = threading.Event()  # broker → client forwarding allowed
        self.forwarding.set()
        self.closed = threading.Event()
        self.goaway_at_once = False  # see H2Abuser.goaway_new

    def send_client(self, data: bytes) -> bool:
        with self.write_lock:
            try:
                self.client.sendall(data)
                return True
            except OSError:
                self.close()
                return False

    def close(self) -> None:
        self.closed.set()
        self.reading.set()
        self.forwarding.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class H2Abuser(Lifecycle):
    """Proxy to ``target`` whose connections misbehave on command (see the module).

    Attributes:
        address: ``127.0.0.1:<port>``; ``port``: its port.
        connections: How many connections were accepted so far.
        flooded: Bytes sent by the floods so far.
    """

    def __init__(self, target: str) -> None:
        self._target = parse_address(target)
        self._listener = socket.socket()
        # Small kernel buffers towards the client (accepted sockets inherit them): a
        # flood's answers pile up in the client, not in the kernel, after a few KiB.
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.port: int = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self.connections = 0
        self.flooded = 0
        self._goaway_new = False

    def start(self) -> Self:
        """Accept and forward on ``lbtest-h2abuse`` threads."""
        self._spawn(self._accept_loop)
        return self

    def close(self) -> None:
        """Stop: every connection is closed and every thread joined."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            links = list(self._links)
            threads = list(self._threads)
        for link in links:
            link.close()
        for thread in threads:
            thread.join(10)
        for link in links:
            link.client.close()
            link.upstream.close()

    # ------------------------------------------------------------------ commands

    def live(self) -> list[_Link]:
        """The connections open now."""
        with self._lock:
            return [link for link in self._links if not link.closed.is_set()]

    def flood(self, kind: str = "ping", budget: int = 64 << 20, seconds: float = 20.0) -> None:
        """Flood every open connection with PINGs (``"ping"``), empty SETTINGS
        (``"settings"``) frames, or acks on stream 1 (``"acks"``: a publish stream's
        answers, for a publish nobody sent), ``budget`` bytes or ``seconds`` at most
        each, reading nothing from the client meanwhile (its answers pile up)."""
        if kind == "ping":
            frame = _HEADER.pack(8 << 8 | 6, 0, 0) + b"abuse!!!"
        elif kind == "acks":
            answer = api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="x")).SerializeToString()
            message = b"\x00" + len(answer).to_bytes(4, "big") + answer
            frame = _HEADER.pack(len(message) << 8 | 0, 0, 1) + message
        else:
            frame = _HEADER.pack(0 << 8 | 4, 0, 0)
        batch = frame * (16384 // len(frame))
        for link in self.live():
            link.reading.clear()
            self._spawn(lambda link=link: self._flood(link, batch, budget, seconds))

    def send_frame(self, data: bytes) -> None:
        """Send ``data`` to every open connection's client between two frames."""
        for link in self.live():
            link.send_client(data)

    def goaway_new(self) -> None:
        """From now on, answer each new connection's first broker frame (its SETTINGS)
        with ``GOAWAY(NO_ERROR)`` covering every stream, and forward nothing more from
        the broker: the calls on it never end. Client bytes still reach the broker."""
        self._goaway_new = True

    def stall(self) -> None:
        """Stop reading from, and forwarding to, every open connection's client."""
        for link in self.live():
            link.reading.clear()
            link.forwarding.clear()

    # ------------------------------------------------------------------ threads

    def _spawn(self, target: object) -> None:
        thread = threading.Thread(target=target, name="lbtest-h2abuse", daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _flood(self, link: _Link, batch: bytes, budget: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        sent = 0
        while sent < budget and time.monotonic() < deadline and not link.closed.is_set():
            if not link.send_client(batch):
                break
            sent += len(batch)
            with self._lock:
                self.flooded += len(batch)

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream)
            link.goaway_at_once = self._goaway_new
            with self._lock:
                self.connections += 1
                self._links.append(link)
            self._spawn(lambda link=link: self._to_broker(link))
            self._spawn(lambda link=link: self._to_client(link))

    def _to_broker(self, link: _Link) -> None:
        try:
            while not link.closed.is_set():
                link.reading.wait()
                if link.closed.is_set():
                    return
                data = link.client.recv(65536)
                if not data:
                    return
                link.reading.wait()  # what a recv under way took when the abuse began
                if link.closed.is_set():
                    return
                link.upstream.sendall(data)
        except OSError:
            pass
        finally:
            link.close()

    def _to_client(self, link: _Link) -> None:
        buf = bytearray()
        muted = False  # said goodbye (goaway_at_once): nothing more goes to the client
        try:
            while not link.closed.is_set():
                data = link.upstream.recv(65536)
                if not data:
                    return
                buf += data
                pos = 0
                while len(buf) - pos >= 9:
                    end = pos + 9 + (_HEADER.unpack_from(buf, pos)[0] >> 8)
                    if end > len(buf):
                        break
                    link.forwarding.wait()
                    if muted:
                        pos = end
                        continue
                    if link.closed.is_set() or not link.send_client(bytes(buf[pos:end])):
                        return
                    pos = end
                    if link.goaway_at_once:
                        muted = True
                        if not link.send_client(_GOAWAY_ALL):
                            return
                del buf[:pos]
        except OSError:
            pass
        finally:
            link.close()
