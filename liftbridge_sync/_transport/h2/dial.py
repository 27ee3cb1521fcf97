"""Opening a call over our own HTTP/2: TCP, TLS with ALPN ``h2``, the HTTP/2 preface and
the request (:func:`dial`, shared by the ``"h2"`` publish stream and the ``Subscribe``
reader), and the ``PublishAsync`` opener. The name lookup is bounded by ``rpc_timeout``.
Given a :class:`~liftbridge_sync._transport.aborting.DialAbort`, the TLS pre-flight, the
name lookup, the connect, the TLS handshake, the write of the preface and the request,
and the wait for the broker's first frame are abandoned as soon as it aborts (the
publisher's ``close()``, a subscribe call's ``cancel()``). Every function here is
thread-safe."""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import h2.config
import h2.connection
import h2.exceptions
import h2.settings

from liftbridge_sync._transport.aborting import DialAbort, connect, watching
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.h2 import connection as _connection
from liftbridge_sync._transport.h2 import framing
from liftbridge_sync._transport.h2.connection import H2PublishStream
from liftbridge_sync._transport.h2.limits import max_message_size
from liftbridge_sync._transport.h2.pings import PingPolicy
from liftbridge_sync._transport.h2.responses import unavailable as _unavailable
from liftbridge_sync._transport.h2.sockets import bound_unacknowledged
from liftbridge_sync._transport.publish_stream import PublishStream, StreamEvent
from liftbridge_sync._transport.tls import TLSSetup
from liftbridge_sync.options import ClientOptions, parse_address

__all__ = ["DialError", "dial", "open_h2_stream"]

_PATH = b"/proto.API/PublishAsync"
#: Longest wait for the broker's side of the HTTP/2 handshake (also ``rpc_timeout``).
_HANDSHAKE_TIMEOUT = 5.0


def _await_handshake(sock: socket.socket, address: str, timeout: float, bound: str = "") -> None:
    """Wait until the broker sends anything (its SETTINGS frame opens every HTTP/2
    connection): a listener that accepts connections and never answers (a hung process,
    a proxy with nothing behind it) is unavailable, not a stream to write publishes to.
    Nor is one whose first bytes are no SETTINGS frame (NATS's port greets with
    ``INFO``, an HTTP/1 server answers ``HTTP/1.1``): the stream would die at once
    every time, and pending publishes wait for their ack timeout instead of failing as
    unreachable. (Bytes of a TLS record are left to the stream, which tells a port
    that requires TLS.)"""
    if isinstance(sock, ssl.SSLSocket):
        if sock.pending():
            return
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise _unavailable(
                f"{address} accepted the connection but sent no HTTP/2 handshake "
                f"(its SETTINGS) within {timeout:g}s{bound}"
            )
    if isinstance(sock, ssl.SSLSocket):
        return  # ALPN h2 was negotiated
    head = sock.recv(9, socket.MSG_PEEK)
    if len(head) >= 4 and head[3] != _SETTINGS and not _tls_record(head):
        raise _unavailable(
            f"{address} does not speak HTTP/2: it began with {head!r}, not a SETTINGS "
            "frame (is it a Liftbridge server's gRPC port?)"
        )


#: How a step's timeout cut short by the dial's one bound says so.
_DIAL_BOUND = " (what was left of the dial's {:g}s, rpc_timeout, for all its steps)"

#: The type of the frame every HTTP/2 server sends first (RFC 9113, 3.4).
_SETTINGS = 0x4


def _tls_record(head: bytes) -> bool:
    """Whether ``head`` starts like a TLS record (alert or handshake, version 3.x)."""
    return head[0] in (0x15, 0x16) and head[1] == 0x03


def _keepalive(options: ClientOptions) -> tuple[float | None, float]:
    """(seconds without reads before a PING or None, seconds to wait for its answer)."""
    settings = dict(options.grpc_options)
    time_ms = settings.get("grpc.keepalive_time_ms")
    timeout_ms = settings.get("grpc.keepalive_timeout_ms")
    every = float(time_ms) / 1000 if isinstance(time_ms, int | float) and time_ms > 0 else None
    wait = (
        float(timeout_ms) / 1000 if isinstance(timeout_ms, int | float) and timeout_ms > 0 else 20.0
    )
    return every, wait


class DialError(Exception):
    """The broker could not be reached or the stream not opened; the text says why."""


class _Deadline:
    """The one bound a dial's steps share: ``rpc_timeout`` from the dial's start, not
    ``rpc_timeout`` each (a broker slow at every step, each just under its timeout,
    held a dial for several times the bound).

    Each step runs inside :meth:`step`, which gives the socket what is left as its
    timeout and names the step in the error when it runs out. Used by one thread.
    """

    __slots__ = ("_address", "_at", "_timeout")

    def __init__(self, address: str, timeout: float, at: float | None = None) -> None:
        self._address = address
        self._timeout = timeout
        self._at = time.monotonic() + timeout if at is None else at

    @property
    def at(self) -> float:
        """The deadline, a :func:`time.monotonic` time."""
        return self._at

    def left(self, what: str) -> float:
        """Seconds left for the step ``what``.

        Raises:
            DialError: none are left.
        """
        left = self._at - time.monotonic()
        if left <= 0:
            raise self.expired(what)
        return left

    def expired(self, what: str) -> DialError:
        """The error of the step ``what`` that ran out of time."""
        return DialError(
            f"cannot open a stream to {self._address}: {what} did not finish within "
            f"the dial's {self._timeout:g}s (rpc_timeout, for all its steps)"
        )

    def step(self, sock: socket.socket, what: str) -> contextlib.AbstractContextManager[None]:
        """Run the blocking step ``what`` on ``sock`` with what is left as its timeout.

        Raises:
            DialError: no time is left, or the step timed out.
        """
        sock.settimeout(self.left(what))
        return self._timing_out(what)

    @contextlib.contextmanager
    def _timing_out(self, what: str) -> Iterator[None]:
        try:
            yield
        except TimeoutError as exc:  # socket.timeout, and ssl's handshake timeout too
            raise self.expired(what) from exc


def _send_all(sock: socket.socket, data: bytes, deadline: _Deadline) -> None:
    """``sock.sendall(data)`` by ``deadline`` in all. (An SSL socket's ``sendall`` gives
    each ``send`` the whole timeout afresh: a broker that reads a little at a time would
    stretch it.)"""
    view = memoryview(data)
    while view:
        with deadline.step(sock, "writing the preface and the request"):
            sent = sock.send(view)
        view = view[sent:]


def dial(
    address: str,
    options: ClientOptions,
    tls: TLSSetup | None,
    path: bytes,
    recv_window: int,
    body: bytes | None = None,
    abort: DialAbort | None = None,
    deadline: float | None = None,
) -> tuple[socket.socket, h2.connection.H2Connection, int]:
    """Open one gRPC call on a new HTTP/2 connection (the publish and subscribe dial).

    TCP (name lookup and connect, ``TCP_NODELAY``), TLS with ALPN ``h2`` from the
    client's one :class:`~liftbridge_sync._transport.tls.TLSSetup`, the connection
    preface with our SETTINGS and receive window, the request headers and, for a call
    with a single request, ``body`` (one gRPC message) ending the request. All the steps
    share one bound, ``rpc_timeout`` (or ``deadline``), not one each; the error names
    the step that ran out of it. Everything is written before returning; the socket is
    left with ``rpc_timeout`` as its timeout.

    Args:
        address: ``host:port`` of the broker.
        options: The client's options (``rpc_timeout``).
        tls: The client's TLS set-up, ``None`` for plaintext.
        path: The RPC's HTTP/2 path, e.g. ``b"/proto.API/Subscribe"``.
        recv_window: Receive window of the stream and the connection, bytes.
        body: The request message, already serialized, or ``None`` to keep the
            request open (a client stream).
        abort: Abandons the name lookup, the connect, the TLS handshake and the write of
            the preface and request from another thread (the publisher's ``close()``, a
            subscribe call's ``cancel()``).
        deadline: When the dial must be done (:func:`time.monotonic`), for a caller
            whose own steps share the bound; ``None``: ``rpc_timeout`` from now.

    Returns:
        The socket, the ``h2`` connection and the stream id.

    Raises:
        DialError: the connection or the stream could not be opened.
        ConfigurationError: the TLS options' certificates do not load.
        LocalResourceError: the process has no file descriptor left (not retried).
        ClientClosedError: ``abort`` aborted.
    """
    host, port = parse_address(address)
    bound = _Deadline(address, options.rpc_timeout, deadline)
    try:
        # connect() keeps to its timeout in all (the name lookup included); a dial
        # given no deadline has all of rpc_timeout left, as connect's errors then say.
        timeout = options.rpc_timeout if deadline is None else bound.left("the TCP connect")
        sock = connect(host, port, timeout, abort)
    except OSError as exc:
        raise DialError(f"cannot connect to {address}: {exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A broker that stops acknowledging TCP is given up on (Linux: TCP_USER_TIMEOUT).
        bound_unacknowledged(sock, options.keepalive_timeout)
        if tls is not None:
            sock = tls.context().wrap_socket(
                sock, server_hostname=tls.server_hostname(host), do_handshake_on_connect=False
            )
            # The handshake keeps to the socket's timeout in all (not per read).
            with watching(abort, sock), bound.step(sock, "the TLS handshake"):
                sock.do_handshake()
            if sock.selected_alpn_protocol() != "h2":
                raise DialError(f"{address} did not negotiate HTTP/2 (ALPN h2)")
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        conn.update_settings(
            {
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: recv_window,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        if recv_window > 65535:
            conn.increment_flow_control_window(recv_window - 65535)
        stream_id = conn.get_next_available_stream_id()
        # TLSOptions.server_name when set, else the address: what our grpcio channels
        # send (their grpc.default_authority).
        authority = tls.server_hostname(address) if tls is not None else address
        conn.send_headers(
            stream_id,
            [
                (b":method", b"POST"),
                (b":scheme", b"https" if tls is not None else b"http"),
                (b":path", path),
                (b":authority", authority.strip().encode()),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"user-agent", b"liftbridge-sync"),
            ],
        )
        if body is not None:
            conn.send_data(stream_id, framing.PREFIX.pack(0, len(body)) + body, end_stream=True)
        # A broker that reads nothing holds this write once the buffers are full (up to
        # rpc_timeout): the abort wakes it as it wakes the steps before.
        with watching(abort, sock):
            _send_all(sock, conn.data_to_send(), bound)
        sock.settimeout(options.rpc_timeout)
    except BaseException as exc:
        sock.close()
        if isinstance(exc, OSError | h2.exceptions.ProtocolError):
            raise DialError(f"cannot open a stream to {address}: {exc}") from exc
        raise
    return sock, conn, stream_id


def open_h2_stream(
    core: ClientCore,
    address: str,
    epoch: int,
    on_event: Callable[[StreamEvent], None],
    abort: DialAbort | None = None,
    deadline: float | None = None,
) -> PublishStream:
    """The ``"h2"`` :data:`~liftbridge_sync._transport.publish_stream.StreamOpener`.

    Looks the host up and connects, negotiates TLS with ALPN ``h2`` when configured,
    sends the connection preface and the request headers, waits for the broker's first
    frame (at most 5 s), all within ``rpc_timeout`` in all, or by ``deadline`` if that
    comes first (the TLS pre-flight included; the error names the step that ran out of
    it), then hands the socket to a new
    :class:`H2PublishStream`. Called on the publisher's owner thread; ``abort`` ends the
    TLS pre-flight (:meth:`~liftbridge_sync._transport.channels.ChannelPool.check_tls`),
    the name lookup, the connect, the TLS handshake, the write and the wait at once.

    Raises:
        BrokerUnavailableError: if the broker cannot be reached, TLS fails, or it sends
            nothing back.
        LocalResourceError: the process has no file descriptor left (not retried).
        ClientClosedError: ``abort`` aborted.
    """
    if abort is not None:
        abort.check()
    options = core.options
    # One bound for every step below, the pre-flight included: rpc_timeout in all (or
    # the caller's deadline, if sooner).
    budget = options.rpc_timeout
    if deadline is not None:
        budget = max(0.0, min(budget, deadline - time.monotonic()))
    bound = _Deadline(address, budget)
    # The same TLS diagnosis as the gRPC channels get: a misconfiguration is a typed,
    # non-retried TLSError naming its cause, not a stream that never opens.
    core.pool.check_tls(address, budget=budget, abort=abort)
    try:
        bound.left("the TLS pre-flight")  # it may have taken all of it
        sock, conn, stream_id = dial(
            address,
            options,
            core.pool.tls,
            _PATH,
            _connection._RECV_WINDOW,
            abort=abort,
            deadline=bound.at,
        )
    except DialError as exc:
        raise _unavailable(str(exc)) from exc
    try:
        what = "the broker's HTTP/2 handshake (its SETTINGS)"
        try:
            left = bound.left(what)
        except DialError as exc:
            raise _unavailable(str(exc)) from None
        with watching(abort, sock):
            _await_handshake(
                sock,
                address,
                min(left, _HANDSHAKE_TIMEOUT),
                bound="" if left > _HANDSHAKE_TIMEOUT else _DIAL_BOUND.format(options.rpc_timeout),
            )
        return H2PublishStream(
            sock,
            conn,
            stream_id,
            epoch,
            on_event,
            keepalive=_keepalive(options),
            stall_bound=options.keepalive_timeout,
            ack_read_delay=options.ack_read_delay,
            max_message=max_message_size(options),
            pings=PingPolicy.from_grpc_options(dict(options.grpc_options)),
            # The publisher's abort ends its streams' questions as its shutdown begins
            # (it then joins their threads); the client's close() at the latest.
            tls_abort=abort if abort is not None else core.pool.closing,
        )
    except OSError as exc:
        sock.close()
        raise _unavailable(f"cannot open a stream to {address}: {exc}") from exc
    except BaseException:
        sock.close()
        raise
