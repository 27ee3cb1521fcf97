"""Judging a client's HTTP/2 PINGs as a grpc-go server would, from a proxy's tap.

Attach :meth:`PingWatch.tap` to a :class:`~liftbridge_sync.testing.TcpProxy` in front of
a broker (fake or real): it reads the frames flowing each way and keeps grpc-go's
keepalive-enforcement score per connection. A client PING earns a strike when it comes
sooner than ``min_time`` after the previous one and the server sent no DATA or HEADERS
in between; more than two strikes is what makes grpc-go send
``GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")`` (``http2_server.go``, ``handlePing``).
"""

from __future__ import annotations

import dataclasses
import struct
import threading
import time

__all__ = ["PingWatch"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADER = struct.Struct(">IBI")  # (length << 8 | type), flags, stream id
_DATA, _HEADERS, _PING, _GOAWAY = 0x0, 0x1, 0x6, 0x7
_ACK = 0x1
#: grpc-go's ``maxPingStrikes``: one more strike than this and the server says goodbye.
MAX_STRIKES = 2


@dataclasses.dataclass
class _Connection:
    client_buffer: bytearray = dataclasses.field(default_factory=bytearray)
    server_buffer: bytearray = dataclasses.field(default_factory=bytearray)
    preface_seen: bool = False
    last_ping: float | None = None
    server_wrote: bool = False  # DATA or HEADERS since the last client PING
    strikes: int = 0
    pings: int = 0


class PingWatch:
    """grpc-go's view of every client PING through a proxy.

    Args:
        min_time: The server's ``keepalive.EnforcementPolicy.MinTime`` (grpc-go's
            default: 5 minutes).

    Attributes:
        pings: Client PINGs (not ACKs) seen, over all connections.
        most_pings: The most client PINGs seen on any one connection.
        max_strikes: The highest strike count any connection reached.
        server_goaways: GOAWAY frames the server sent.

    Thread-safe: the proxy's thread feeds it, the test reads the counters.
    """

    def __init__(self, min_time: float = 300.0) -> None:
        self._min_time = min_time
        self._lock = threading.Lock()
        self._connections: dict[int, _Connection] = {}
        self.pings = 0
        self.most_pings = 0
        self.max_strikes = 0
        self.server_goaways = 0

    def pings_by_connection(self) -> list[int]:
        """Client PINGs seen on each connection, in the order they were opened."""
        with self._lock:
            return [c.pings for _, c in sorted(self._connections.items())]

    @property
    def would_goaway(self) -> bool:
        """Whether a grpc-go server with this policy would have sent too_many_pings."""
        return self.max_strikes > MAX_STRIKES

    def tap(self, number: int, from_client: bool, data: bytes) -> None:
        """The :attr:`TcpProxy.tap <liftbridge_sync.testing.TcpProxy.tap>` callback."""
        with self._lock:
            connection = self._connections.setdefault(number, _Connection())
            buffer = connection.client_buffer if from_client else connection.server_buffer
            buffer += data
            if from_client and not connection.preface_seen:
                if len(buffer) < len(_PREFACE):
                    return
                del buffer[: len(_PREFACE)]
                connection.preface_seen = True
            while len(buffer) >= 9:
                length_type, flags, _ = _HEADER.unpack_from(buffer)
                length, kind = length_type >> 8, length_type & 0xFF
                if len(buffer) < 9 + length:
                    return
                del buffer[: 9 + length]
                self._frame(connection, from_client, kind, flags)

    def _frame(self, connection: _Connection, from_client: bool, kind: int, flags: int) -> None:
        if not from_client:
            if kind in (_DATA, _HEADERS):
                connection.server_wrote = True
            elif kind == _GOAWAY:
                self.server_goaways += 1
            return
        if kind != _PING or flags & _ACK:
            return
        self.pings += 1
        connection.pings += 1
        self.most_pings = max(self.most_pings, connection.pings)
        now = time.monotonic()
        if connection.server_wrote:
            connection.strikes = 0
        elif connection.last_ping is not None and now - connection.last_ping < self._min_time:
            connection.strikes += 1
        connection.server_wrote = False
        connection.last_ping = now
        self.max_strikes = max(self.max_strikes, connection.strikes)
