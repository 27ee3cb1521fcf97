"""``PublishAsync`` over our own HTTP/2 framing (the ``"h2"`` publish transport).

grpcio's public API writes one HTTP/2 DATA frame with one syscall per message and hands
every message across several threads (performance.md §4, §10). This transport owns the
connection instead: callers append framed requests to a list under a short lock, and
one I/O thread, woken only on the idle → busy transition, writes everything pending
with as few DATA frames as flow control allows and one ``send()``. Responses are
decoded in bulk from each ``recv()``.

The HTTP/2 state machine is the ``h2`` package (the optional ``fast`` extra); this
module adds the gRPC layer on top: request headers, length-prefixed message framing,
``grpc-status`` trailers (also trailers-only responses) and the mapping of connection
failures to :class:`~liftbridge_sync.errors.BrokerUnavailableError`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import ssl
import struct
import tempfile
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.publish_stream import (
    PublishStream,
    StreamClosed,
    StreamEvent,
    StreamResponse,
    StreamResponses,
    StreamSent,
)
from liftbridge_sync._wire.status import (
    CallContext,
    error_from_status,
)
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    LiftbridgeError,
)
from liftbridge_sync.options import TLSOptions, parse_address

__all__ = ["H2PublishStream", "open_h2_stream"]

_log = logging.getLogger(__name__)

_PATH = b"/proto.API/PublishAsync"
#: gRPC message prefix: compressed flag (always 0 here) and big-endian length.
_PREFIX = struct.Struct(">BI")
#: One ``recv()``; a full buffer means more may be waiting, so read again.
_RECV_SIZE = 256 * 1024
#: Our receive window (stream and connection): acks are small, so this is only about
#: sending fewer WINDOW_UPDATE frames.
_RECV_WINDOW = 4 << 20
#: HTTP/2 frame header: 24-bit length and 8-bit type (as one int), flags, stream id.
_FRAME_HEADER = struct.Struct(">IBI")
#: WINDOW_UPDATE frame: length (24 bits) as 16+8, type, flags, stream id, increment.
_WINDOW_UPDATE = struct.Struct(">HBBBII")
#: Return fast-path DATA window in steps of this (far below the 4 MiB windows).
_CREDIT_AT = 64 * 1024
#: Compact the unsent buffer once this much of its head has been framed.
_COMPACT_AT = 1 << 20
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)

_CODES = {code.value[0]: code for code in grpc.StatusCode}
#: HTTP status of a non-gRPC answer → gRPC code (gRPC's http-grpc-status-mapping.md).
_HTTP_CODES = {
    400: grpc.StatusCode.INTERNAL,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.UNIMPLEMENTED,
    429: grpc.StatusCode.UNAVAILABLE,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.UNAVAILABLE,
}
#: RST_STREAM code → gRPC code (gRPC's PROTOCOL-HTTP2.md); anything else is INTERNAL.
_RESET_CODES = {
    h2.errors.ErrorCodes.REFUSED_STREAM: grpc.StatusCode.UNAVAILABLE,
    h2.errors.ErrorCodes.CANCEL: grpc.StatusCode.CANCELLED,
    h2.errors.ErrorCodes.ENHANCE_YOUR_CALM: grpc.StatusCode.RESOURCE_EXHAUSTED,
    h2.errors.ErrorCodes.INADEQUATE_SECURITY: grpc.StatusCode.PERMISSION_DENIED,
}


class _ConnectionLost(Exception):
    """The socket failed or the broker closed it; mapped to BrokerUnavailableError."""


def _unavailable(message: str) -> BrokerUnavailableError:
    return BrokerUnavailableError(f"publish stream: {message}", code="UNAVAILABLE")


class H2PublishStream:
    """One ``PublishAsync`` call on its own HTTP/2 connection.

    ``send``, ``close`` and ``cancel`` only touch a list and a few flags under a short
    lock and wake the I/O thread (``liftbridge-publish-io``) when it is idle; that
    thread does all socket and HTTP/2 work and emits every event, ending with exactly
    one :class:`StreamClosed`. Thread-safe.
    """

    def __init__(
        self,
        sock: socket.socket,
        conn: h2.connection.H2Connection,
        stream_id: int,
        epoch: int,
        on_event: Callable[[StreamEvent], None],
    ) -> None:
        self._sock = sock
        self._conn = conn
        self._stream_id = stream_id
        self._epoch = epoch
        self._on_event = on_event
        self._tls = isinstance(sock, ssl.SSLSocket)

        # Shared with callers, guarded by _lock.
        self._lock = threading.Lock()
        self._queue: list[bytes] = []
        self._queued_bytes = 0  # total message bytes ever queued
        self._notes: list[tuple[int, str]] = []  # (end byte offset, correlation id)
        self._signalled = False  # a wake-up byte is on its way to the I/O thread
        self._close_requested = False
        self._cancel_requested = False
        self._done = False  # the I/O thread has finished; sends are dropped

        # I/O thread only.
        self._unsent = bytearray()  # message bytes not yet given to h2
        self._unsent_pos = 0
        self._framed_bytes = 0  # message bytes given to h2 (and so to the socket buffer)
        self._waiting_notes: deque[tuple[int, str]] = deque()
        self._outbuf = bytearray()  # h2 output the socket did not take yet
        self._inbuf = bytearray()  # received bytes not yet forming a whole frame
        self._rbuf = bytearray()  # response bytes not yet forming a whole message
        self._headers_seen = False  # a valid response HEADERS frame arrived
        self._credit = 0  # bytes of fast-path DATA not yet returned with WINDOW_UPDATE
        self._closing = False
        self._half_closed = False
        self._ended = False
        self._error: LiftbridgeError | None = None
        self._status: int | None = None
        self._message = ""

        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sock.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._want_write = False
        self._thread = threading.Thread(target=self._run, name="liftbridge-publish-io", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callers

    def send(self, request: api_pb2.PublishRequest, *, notify_sent: bool = False) -> None:
        """Queue ``request``; never blocks. Dropped once the stream has ended."""
        data = request.SerializeToString()
        framed = _PREFIX.pack(0, len(data)) + data
        with self._lock:
            if self._done or self._close_requested:
                return  # the publisher re-sends pending requests on its next stream
            self._queue.append(framed)
            self._queued_bytes += len(framed)
            if notify_sent:
                self._notes.append((self._queued_bytes, request.correlationId))
            if not self._signalled:
                self._wake()

    def close(self) -> None:
        """Half-close once everything queued is written; responses keep arriving."""
        with self._lock:
            if self._done or self._close_requested:
                return
            self._close_requested = True
            if not self._signalled:
                self._wake()

    def cancel(self) -> None:
        """Reset the stream and drop the connection; :class:`StreamClosed` follows."""
        with self._lock:
            if self._done or self._cancel_requested:
                return
            self._cancel_requested = True
            if not self._signalled:
                self._wake()

    def join(self, timeout: float | None) -> None:
        """Wait for the I/O thread to finish (no-op when called from it)."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _wake(self) -> None:
        # Called under _lock, so the I/O thread cannot close the socket meanwhile; only
        # one byte per idle → busy transition, so the socketpair never fills up.
        self._signalled = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    # ------------------------------------------------------------------ I/O thread

    def _run(self) -> None:
        error: LiftbridgeError | None
        try:
            error = self._loop()
        except _ConnectionLost as exc:
            error = _unavailable(str(exc) or "connection lost")
        except h2.exceptions.ProtocolError as exc:
            error = _unavailable(f"HTTP/2 protocol error: {exc!r}")
        except Exception as exc:  # pragma: no cover - a bug must still end the stream
            _log.exception("publish I/O thread failed")
            error = _unavailable(f"transport failure: {exc!r}")
        finally:
            with self._lock:
                self._done = True
            self._selector.close()
            self._sock.close()
            self._wake_r.close()
            self._wake_w.close()
        self._on_event(StreamClosed(self._epoch, error))

    def _loop(self) -> LiftbridgeError | None:
        select = self._selector.select
        sock = self._sock
        while True:
            for key, mask in select():
                if key.fileobj is sock:
                    if mask & selectors.EVENT_READ:
                        self._read()
                else:
                    with contextlib.suppress(*_WOULD_BLOCK):
                        self._wake_r.recv(4096)
            if self._ended:
                self._goodbye()
                return self._error
            if self._cancel_requested:
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    self._conn.reset_stream(self._stream_id, h2.errors.ErrorCodes.CANCEL)
                self._goodbye()
                return error_from_status(
                    grpc.StatusCode.CANCELLED, "publish stream cancelled", CallContext.GENERIC
                )
            self._take_queue()
            self._pump()
            if self._closing and not self._half_closed and self._unsent_pos == len(self._unsent):
                # Everything queued before close() has been framed: END_STREAM after it.
                self._half_closed = True
                self._conn.end_stream(self._stream_id)
            self._flush()

    def _take_queue(self) -> None:
        with self._lock:
            batch = self._queue
            notes = self._notes
            closing = self._close_requested
            if batch:
                self._queue = []
            if notes:
                self._notes = []
            self._signalled = False
        if batch:
            self._unsent += b"".join(batch)
        if notes:
            self._waiting_notes.extend(notes)
        if closing:
            self._closing = True

    def _pump(self) -> None:
        """Give h2 as many pending bytes as the flow-control windows allow."""
        unsent = self._unsent
        pos = self._unsent_pos
        size = len(unsent)
        if pos == size:
            return
        conn = self._conn
        sid = self._stream_id
        frame = conn.max_outbound_frame_size
        while pos < size:
            window = conn.local_flow_control_window(sid)
            if window <= 0:
                break  # a WindowUpdated event brings us back here
            n = min(window, frame, size - pos)
            with memoryview(unsent) as view:
                conn.send_data(sid, bytes(view[pos : pos + n]))
            pos += n
        self._framed_bytes += pos - self._unsent_pos
        if pos == size:
            unsent.clear()
            pos = 0
        elif pos >= _COMPACT_AT:
            del unsent[:pos]
            pos = 0
        self._unsent_pos = pos

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        out = self._outbuf
        if data:
            if out:
                out += data
            else:
                sent = self._send_some(data)
                if sent < len(data):
                    out += data[sent:]
        while out:
            sent = self._send_some(out)
            if not sent:
                break
            del out[:sent]
        if bool(out) != self._want_write:
            self._want_write = bool(out)
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
            self._selector.modify(self._sock, events)
        if not out and self._waiting_notes:
            notes = self._waiting_notes
            framed = self._framed_bytes
            emit = self._on_event
            while notes and notes[0][0] <= framed:
                emit(StreamSent(self._epoch, notes.popleft()[1]))

    def _send_some(self, data: bytes | bytearray) -> int:
        try:
            return self._sock.send(data)
        except _WOULD_BLOCK:
            return 0
        except OSError as exc:
            raise _ConnectionLost(f"send failed: {exc}") from exc

    def _goodbye(self) -> None:
        """Best effort GOAWAY (and whatever else h2 has queued) before closing."""
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._conn.close_connection()
        with contextlib.suppress(_ConnectionLost):
            self._flush()

    def _read(self) -> None:
        sock = self._sock
        while True:
            try:
                data = sock.recv(_RECV_SIZE)
            except _WOULD_BLOCK:
                return
            except OSError as exc:
                raise _ConnectionLost(f"receive failed: {exc}") from exc
            if not data:
                raise _ConnectionLost("the broker closed the connection")
            self._receive(data)
            if self._ended:
                return
            if len(data) < _RECV_SIZE and not (self._tls and sock.pending()):  # type: ignore[attr-defined]
                return

    def _receive(self, data: bytes) -> None:
        """Split ``data`` into frames: our stream's plain DATA frames are read here, the rest
        goes to h2.

        The broker sends one DATA frame per ack, and h2 spends ~10 µs of pure Python on each
        (it even formats a trace message per frame); taking the message bytes straight
        out of unpadded, non-final DATA frames of an open stream is what keeps acks cheap.
        h2 never sees those frames, so its own flow-control accounting stays consistent;
        their window is returned by our own WINDOW_UPDATE frames. h2 only ever gets whole
        frames, so its buffer holds nothing between calls.
        """
        inbuf = self._inbuf
        inbuf += data
        size = len(inbuf)
        pos = 0
        slow = -1  # start of a run of frames for h2
        rbuf = self._rbuf
        sid = self._stream_id
        limit = self._conn.max_inbound_frame_size
        fast = self._headers_seen and not self._ended
        consumed = 0
        unpack = _FRAME_HEADER.unpack_from
        while size - pos >= 9:
            length_type, flags, stream = unpack(inbuf, pos)
            length = length_type >> 8
            end = pos + 9 + length
            if end > size:
                break
            # Type 0 is DATA; flags 0x1 (END_STREAM) and 0x8 (PADDED) need h2.
            if length_type & 0xFF == 0 and not flags & 0x09 and stream == sid and length <= limit:
                if slow >= 0:
                    self._handle(self._conn.receive_data(bytes(inbuf[slow:pos])))
                    slow = -1
                    fast = self._headers_seen and not self._ended
                if fast:
                    rbuf += inbuf[pos + 9 : end]
                    consumed += length
                    pos = end
                    continue
            if slow < 0:
                slow = pos
            pos = end
        if slow >= 0:
            self._handle(self._conn.receive_data(bytes(inbuf[slow:pos])))
        if pos:
            del inbuf[:pos]
        if consumed:
            self._credit += consumed
            if self._credit >= _CREDIT_AT and not self._ended:
                # Connection and stream windows, both (frames h2 did not see).
                credit = _WINDOW_UPDATE.pack(0, 4, 8, 0, 0, self._credit)
                credit += _WINDOW_UPDATE.pack(0, 4, 8, 0, sid, self._credit)
                self._outbuf += credit
                self._credit = 0
            if len(rbuf) >= 5:
                self._decode()

    def _handle(self, events: list[h2.events.Event]) -> None:
        consumed = 0
        rbuf = self._rbuf
        for event in events:
            kind = type(event)
            if kind is h2.events.DataReceived:
                assert isinstance(event, h2.events.DataReceived)
                consumed += event.flow_controlled_length or 0
                if event.data:
                    rbuf += event.data
            elif kind is h2.events.ResponseReceived:
                assert isinstance(event, h2.events.ResponseReceived)
                self._on_headers(event.headers or [])
            elif kind is h2.events.TrailersReceived:
                assert isinstance(event, h2.events.TrailersReceived)
                self._on_status(event.headers or [])
            elif kind is h2.events.StreamEnded:
                self._end(self._final_error())
            elif kind is h2.events.StreamReset:
                assert isinstance(event, h2.events.StreamReset)
                code = _RESET_CODES.get(event.error_code, grpc.StatusCode.INTERNAL)  # type: ignore[call-overload]
                self._end(error_from_status(code, f"stream reset ({event.error_code!r})"))
            elif kind is h2.events.ConnectionTerminated:
                assert isinstance(event, h2.events.ConnectionTerminated)
                self._end(_unavailable(f"the broker sent GOAWAY ({event.error_code!r})"))
            # SETTINGS and PING are acknowledged by h2 itself (flushed by the loop);
            # WindowUpdated needs nothing: the loop pumps pending data after each read.
        if consumed and not self._ended:
            # One WINDOW_UPDATE decision per recv() instead of one per frame.
            self._conn.acknowledge_received_data(consumed, self._stream_id)
        if len(rbuf) >= 5:
            self._decode()

    def _decode(self) -> None:
        rbuf = self._rbuf
        size = len(rbuf)
        pos = 0
        parse = api_pb2.PublishResponse.FromString
        responses = []
        while size - pos >= 5:
            flag, length = _PREFIX.unpack_from(rbuf, pos)
            end = pos + 5 + length
            if end > size:
                break
            if flag:
                self._end(
                    error_from_status(grpc.StatusCode.INTERNAL, "compressed response not asked for")
                )
                break
            try:
                responses.append(parse(bytes(rbuf[pos + 5 : end])))
            except DecodeError as exc:
                self._end(error_from_status(grpc.StatusCode.INTERNAL, f"bad response: {exc}"))
                break
            pos = end
        if pos:
            del rbuf[:pos]
        if len(responses) == 1:
            self._on_event(StreamResponse(self._epoch, responses[0]))
        elif responses:
            self._on_event(StreamResponses(self._epoch, responses))

    def _on_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        status = fields.get(b":status", b"")
        if status != b"200":
            try:
                http = int(status)
            except ValueError:
                http = 0
            code = _HTTP_CODES.get(http, grpc.StatusCode.UNKNOWN)
            self._end(error_from_status(code, f"HTTP status {status.decode(errors='replace')}"))
            return
        content_type = fields.get(b"content-type", b"")
        if not content_type.startswith(b"application/grpc"):
            self._end(
                error_from_status(
                    grpc.StatusCode.UNKNOWN,
                    f"not a gRPC response (content-type {content_type.decode(errors='replace')!r})",
                )
            )
            return
        self._headers_seen = True
        if b"grpc-status" in fields:  # trailers-only response
            self._on_status(headers)

    def _on_status(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        raw = fields.get(b"grpc-status")
        if raw is not None:
            try:
                self._status = int(raw)
            except ValueError:
                self._status = grpc.StatusCode.UNKNOWN.value[0]
        message = fields.get(b"grpc-message")
        if message:
            self._message = urllib.parse.unquote_to_bytes(message).decode("utf-8", "replace")

    def _final_error(self) -> LiftbridgeError | None:
        if self._status is None:
            return error_from_status(grpc.StatusCode.INTERNAL, "stream ended without grpc-status")
        if self._status == 0:
            return None
        code = _CODES.get(self._status, grpc.StatusCode.UNKNOWN)
        return error_from_status(code, self._message, CallContext.GENERIC)

    def _end(self, error: LiftbridgeError | None) -> None:
        # The first reason wins (e.g. trailers followed by the broker's RST_STREAM).
        if not self._ended:
            self._ended = True
            self._error = error


def _tls_context(tls: TLSOptions) -> ssl.SSLContext:
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
    """The ``"h2"`` :data:`~liftbridge_sync._publish_stream.StreamOpener`.

    Connects (bounded by ``rpc_timeout``), negotiates TLS with ALPN ``h2`` when
    configured, sends the connection preface and the request headers, then hands the
    socket to a new :class:`H2PublishStream`. Called on the publisher's owner thread.

    Raises:
        BrokerUnavailableError: if the broker cannot be reached or TLS fails.
    """
    options = core.options
    host, port = parse_address(address)
    tls = options.tls
    try:
        sock = socket.create_connection((host, port), timeout=options.rpc_timeout)
    except OSError as exc:
        raise _unavailable(f"cannot connect to {address}: {exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = _tls_context(tls).wrap_socket(sock, server_hostname=tls.server_name or host)
            if sock.selected_alpn_protocol() != "h2":
                raise _unavailable(f"{address} did not negotiate HTTP/2 (ALPN h2)")
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        conn.update_settings(
            {
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _RECV_WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        if _RECV_WINDOW > 65535:
            conn.increment_flow_control_window(_RECV_WINDOW - 65535)
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
        return H2PublishStream(sock, conn, stream_id, epoch, on_event)
    except LiftbridgeError:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        raise _unavailable(f"cannot open a stream to {address}: {exc}") from exc
