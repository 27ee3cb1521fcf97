"""Socket calls of the h2 publish stream: non-blocking, and with the C speedups holding
the GIL.

``socket.send``/``recv`` release the GIL around the system call. The stream's I/O lock
is held across them, and a thread that released the GIL may wait a whole switch interval
(5 ms) to get it back while another thread runs Python: nobody could write meanwhile.
On plaintext sockets the C speedups' ``send_held``/``recv_held`` make the same
non-blocking calls without releasing it (they take microseconds). TLS sockets go
through :mod:`ssl` as before.
"""

from __future__ import annotations

import contextlib
import socket
import ssl

from liftbridge_sync._transport.aborting import DialAbort, connect, watching
from liftbridge_sync._wire.speedups import recv_held, send_held
from liftbridge_sync.errors import LocalResourceError

__all__ = [
    "READS_PER_TURN",
    "RECV_SIZE",
    "ConnectionLost",
    "SocketCalls",
    "bound_unacknowledged",
    "speaks_tls",
]

#: One ``recv()`` of the publish and subscribe streams; a full buffer means more may be
#: waiting, so read again. Below glibc's mmap threshold (128 KiB): ``socket.recv``
#: allocates its whole size first, and a larger buffer is mapped and unmapped on every
#: read in a thread's malloc arena (about 15 µs).
RECV_SIZE = 120 * 1024
#: Full reads one turn of a publish stream's loop makes at most (about 1 MiB): a broker
#: that keeps the socket full gets no more than this between two hand-overs of acks.
READS_PER_TURN = 8
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def bound_unacknowledged(sock: socket.socket, seconds: float) -> None:
    """Make the kernel fail ``sock`` (``ETIMEDOUT``) when data it sent stays
    unacknowledged, or the peer's window stays shut, for ``seconds`` (Linux's
    ``TCP_USER_TIMEOUT``, which grpc sets too): a broker that stalled or vanished with
    our data in flight is noticed without PINGs. A no-op where the option is missing."""
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, max(1, int(seconds * 1000)))


class ConnectionLost(Exception):
    """The socket failed or the broker closed it; mapped to BrokerUnavailableError."""


def speaks_tls(
    peer: tuple[str, int], timeout: float = 2.0, abort: DialAbort | None = None
) -> str | None:
    """Whether ``peer`` answers a TLS ClientHello within ``timeout`` seconds (for the
    connect and for the handshake), and with what proof.

    Args:
        peer: ``(host, port)`` to ask.
        timeout: Seconds for the connect, and again for the handshake.
        abort: Abandons the connect and the handshake from another thread (the
            client's ``close()``).

    Returns:
        ``"verified"``: it completed a handshake with a certificate valid for the
        peer's address from a CA of the system store, which nobody else on the path
        can fake; ``"unverified"``: something answered in TLS (a hint, never grounds
        for a permanent error); ``None``: no TLS answer.

    Raises:
        ClientClosedError: ``abort`` aborted.

    Thread-safe.
    """
    context = ssl.create_default_context()  # the system store, hostname checked
    try:
        with connect(*peer, timeout, abort) as raw:
            with context.wrap_socket(
                raw, server_hostname=peer[0], do_handshake_on_connect=False
            ) as conn:
                with watching(abort, conn):
                    conn.do_handshake()
                return "verified"
    except ssl.SSLCertVerificationError:
        return "unverified"
    except ssl.SSLError as exc:
        # An alert (say, a client certificate is required) is still TLS talking; a
        # plaintext peer gives a record-layer or version error instead.
        text = str(exc).upper()
        plaintext = "WRONG_VERSION_NUMBER" in text or "RECORD_LAYER" in text or "EOF" in text
        return None if plaintext else "unverified"
    except (OSError, LocalResourceError):
        # No descriptor for the question: no answer (the caller's error stands).
        return None


class SocketCalls:
    """Non-blocking send/receive on the stream's socket and its wake-up socket.

    Used under the stream's I/O lock only (one thread at a time).
    """

    def __init__(self, sock: socket.socket, wake_r: socket.socket) -> None:
        self._sock = sock
        self._wake_r = wake_r
        held = not isinstance(sock, ssl.SSLSocket) and send_held is not None
        self._send_held = send_held if held else None
        self._recv_held = recv_held if held else None
        self._fd = sock.fileno()
        self._wake_fd = wake_r.fileno()

    def send_some(self, data: bytes | bytearray) -> int:
        """Bytes of ``data`` the socket took (0: it would block).

        Raises:
            ConnectionLost: the send failed.
        """
        try:
            if self._send_held is not None:
                return self._send_held(self._fd, data)
            return self._sock.send(data)
        except _WOULD_BLOCK:
            return 0
        except OSError as exc:
            raise ConnectionLost(f"send failed: {exc}") from exc

    def recv_some(self) -> bytes | None:
        """What the socket has (``b""``: the broker closed it; ``None``: nothing yet).

        Raises:
            ConnectionLost: the receive failed.
        """
        try:
            if self._recv_held is not None:
                return self._recv_held(self._fd, RECV_SIZE)
            return self._sock.recv(RECV_SIZE)
        except _WOULD_BLOCK:
            return None
        except OSError as exc:
            raise ConnectionLost(f"receive failed: {exc}") from exc

    def drain_wake_ups(self) -> None:
        """Read the wake-up bytes waiting (their number does not matter)."""
        if self._recv_held is not None:
            with contextlib.suppress(OSError):
                self._recv_held(self._wake_fd, 4096)
            return
        with contextlib.suppress(*_WOULD_BLOCK):
            self._wake_r.recv(4096)
