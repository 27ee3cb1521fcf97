"""Opening the ``"h2"`` publish transport: TCP, TLS with ALPN ``h2``, the HTTP/2 preface
and the ``PublishAsync`` request headers. Every function here is thread-safe."""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import tempfile
from collections.abc import Callable

import h2.config
import h2.connection
import h2.settings

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.h2 import connection as _connection
from liftbridge_sync._transport.h2.connection import H2PublishStream
from liftbridge_sync._transport.h2.pings import PingPolicy
from liftbridge_sync._transport.h2.responses import unavailable as _unavailable
from liftbridge_sync._transport.publish_stream import PublishStream, StreamEvent
from liftbridge_sync.errors import LiftbridgeError
from liftbridge_sync.options import ClientOptions, TLSOptions, parse_address

__all__ = ["open_h2_stream", "tls_context"]

_PATH = b"/proto.API/PublishAsync"
#: Longest wait for the broker's side of the HTTP/2 handshake (also ``rpc_timeout``).
_HANDSHAKE_TIMEOUT = 5.0


def _await_handshake(sock: socket.socket, address: str, timeout: float) -> None:
    """Wait until the broker sends anything (its SETTINGS frame opens every HTTP/2
    connection): a listener that accepts connections and never answers (a hung process,
    a proxy with nothing behind it) is unavailable, not a stream to write publishes to."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise _unavailable(
                f"{address} accepted the connection but sent no HTTP/2 handshake "
                f"within {timeout:g}s"
            )


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


def tls_context(tls: TLSOptions) -> ssl.SSLContext:
    """An SSL context for ``tls`` offering ALPN ``h2`` (shared by our HTTP/2 transports)."""
    ca = tls.ca_cert
    context = ssl.create_default_context(cadata=ca.decode("ascii") if isinstance(ca, bytes) else ca)
    if tls.client_cert is not None and tls.client_key is not None:
        # load_cert_chain only reads files; keep the key on disk just for the call.
        fd, path = tempfile.mkstemp(prefix="liftbridge-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as handle:
                cert, key = tls.client_cert, tls.client_key
                handle.write(cert if isinstance(cert, bytes) else cert.encode())
                handle.write(b"\n")
                handle.write(key if isinstance(key, bytes) else key.encode())
            context.load_cert_chain(path)
        finally:
            os.unlink(path)
    context.set_alpn_protocols(["h2"])
    return context


def open_h2_stream(
    core: ClientCore, address: str, epoch: int, on_event: Callable[[StreamEvent], None]
) -> PublishStream:
    """The ``"h2"`` :data:`~liftbridge_sync._transport.publish_stream.StreamOpener`.

    Connects (bounded by ``rpc_timeout``), negotiates TLS with ALPN ``h2`` when
    configured, sends the connection preface and the request headers, waits for the
    broker's first frame (at most 5 s), then hands the socket to a new
    :class:`H2PublishStream`. Called on the publisher's owner thread.

    Raises:
        BrokerUnavailableError: if the broker cannot be reached, TLS fails, or it sends
            nothing back.
    """
    options = core.options
    host, port = parse_address(address)
    tls = options.tls
    # The same TLS diagnosis as the gRPC channels get: a misconfiguration is a typed,
    # non-retried TLSError naming its cause, not a stream that never opens.
    core.pool.check_tls(address)
    try:
        sock = socket.create_connection((host, port), timeout=options.rpc_timeout)
    except OSError as exc:
        raise _unavailable(f"cannot connect to {address}: {exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls_context(tls).wrap_socket(sock, server_hostname=tls.server_name or host)
            if sock.selected_alpn_protocol() != "h2":
                raise _unavailable(f"{address} did not negotiate HTTP/2 (ALPN h2)")
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        conn.update_settings(
            {
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _connection._RECV_WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        if _connection._RECV_WINDOW > 65535:
            conn.increment_flow_control_window(_connection._RECV_WINDOW - 65535)
        stream_id = conn.get_next_available_stream_id()
        authority = address.strip().encode()
        conn.send_headers(
            stream_id,
            [
                (b":method", b"POST"),
                (b":scheme", b"https" if tls is not None else b"http"),
                (b":path", _PATH),
                (b":authority", authority),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"user-agent", b"liftbridge-sync"),
            ],
        )
        sock.sendall(conn.data_to_send())
        _await_handshake(sock, address, min(options.rpc_timeout, _HANDSHAKE_TIMEOUT))
        return H2PublishStream(
            sock,
            conn,
            stream_id,
            epoch,
            on_event,
            keepalive=_keepalive(options),
            ack_read_delay=options.ack_read_delay,
            pings=PingPolicy.from_grpc_options(dict(options.grpc_options)),
        )
    except LiftbridgeError:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        raise _unavailable(f"cannot open a stream to {address}: {exc}") from exc
