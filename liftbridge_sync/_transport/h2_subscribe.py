"""``Subscribe`` over our own HTTP/2 framing, read on the caller's thread.

grpcio's single-threaded streaming reads still cost about 5-7 µs of Python per message
(five lock pairs, a condition notify and an event object in ``grpc._channel`` for every
``next()``; bench/RESULTS.md). This reader owns one TCP (or TLS) connection per call and
does the work in bulk: one blocking ``recv()`` of up to 256 KiB, then every whole gRPC
message in it is decoded in one loop and handed out one by one from a list. There is no
I/O thread: the thread iterating the subscription does the reads, exactly as with
grpcio's ``SingleThreadedUnaryStream``.

The HTTP/2 state machine (preface, SETTINGS, PING, GOAWAY, RST_STREAM, HPACK) is the
``h2`` package; plain DATA frames of our stream are taken out of the byte stream before
``h2`` sees them (``h2`` spends ~10 µs of pure Python per frame, and the broker sends one
DATA frame per message) and their flow-control window is returned with our own
WINDOW_UPDATE frames.

The call object looks like a grpcio streaming call to
:class:`~liftbridge_sync.subscription.Subscription`: ``next()`` returns the next wire
``Message``, raises ``StopIteration`` when the server ends the stream with OK and a
:class:`SubscribeRpcError` (a ``grpc.RpcError`` with ``code()`` and ``details()``)
otherwise; ``cancel()`` from any thread ends a blocked ``next()`` with ``CANCELLED``.
Connection failures are ``UNAVAILABLE``, so the subscription resubscribes after the last
delivered offset as it does on grpcio.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import urllib.parse
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2 import framing
from liftbridge_sync._transport.h2.dial import tls_context
from liftbridge_sync.options import ClientOptions, parse_address

__all__ = ["H2SubscribeCall", "SubscribeRpcError"]

_SC = grpc.StatusCode
_PATH = b"/proto.API/Subscribe"
#: gRPC message prefix: compressed flag and big-endian length.
_PREFIX = struct.Struct(">BI")
#: HTTP/2 frame header: 24-bit length and 8-bit type (as one int), flags, stream id.
_FRAME_HEADER = struct.Struct(">IBI")
#: A DATA frame header followed by the gRPC prefix of the message it starts: length and
#: type; flags, stream id and compressed flag (compared as bytes); message length.
_DATA_HEAD = struct.Struct(">I6sI")
#: WINDOW_UPDATE frame: length (24 bits) as 16+8, type, flags, stream id, increment.
_WINDOW_UPDATE = struct.Struct(">HBBBII")
#: One ``recv()``.
_RECV_SIZE = 256 * 1024
#: Our receive window (stream and connection). A consumer that stops iterating stops
#: reading, so at most this much is buffered before the broker has to wait.
_RECV_WINDOW = 4 << 20
#: Return the window of the DATA frames we read ourselves in steps of this.
_CREDIT_AT = 256 * 1024
#: Largest message accepted (grpcio's limit on our channels; ``grpc_options`` may change it).
_DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024

_CODES = {code.value[0]: code for code in grpc.StatusCode}
#: HTTP status of a non-gRPC answer → gRPC code (gRPC's http-grpc-status-mapping.md).


class _DeadConnection(Exception):
    """A keepalive PING went unanswered."""


class SubscribeRpcError(grpc.RpcError):
    """How a Subscribe call over our HTTP/2 reader ended, shaped like grpcio's error.

    Immutable; safe to share between threads.
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        """The gRPC status code."""
        return self._code

    def details(self) -> str:
        """The status message."""
        return self._details


def max_message_size(options: ClientOptions) -> int:
    """The receive limit, honouring ``grpc.max_receive_message_length`` in ``grpc_options``.

    A function of immutable options: thread-safe.
    """
    for name, value in options.grpc_options:
        if name == "grpc.max_receive_message_length" and isinstance(value, int) and value > 0:
            return value
    return _DEFAULT_MAX_MESSAGE


class H2SubscribeCall:
    """One ``Subscribe`` call on its own HTTP/2 connection, read by the iterating thread.

    Nothing happens on construction; the first ``next()`` connects (bounded by
    ``rpc_timeout``) and sends the request. The socket is closed when the call ends,
    when it is cancelled, or when the object is collected.

    ``next()`` must be called by one thread at a time; ``cancel()`` is thread-safe.
    """

    def __init__(self, address: str, request: api_pb2.SubscribeRequest, options: ClientOptions):
        self._address = address
        self._request = request
        self._options = options
        self._max_message = max_message_size(options)
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._cancelled = False
        self._reading = False  # the iterating thread may be inside recv()
        self._conn: h2.connection.H2Connection | None = None
        self._stream_id = 1
        #: Decoded messages not handed out yet, and the index of the next one.
        self._ready: list[api_pb2.Message] = []
        self._next = 0
        self._inbuf = bytearray()  # received bytes not yet forming a whole frame
        self._rbuf = bytearray()  # DATA bytes not yet forming a whole message
        self._outbuf = bytearray()  # frames to write after this read
        self._credit = 0
        self._headers_seen = False
        self._fast = False  # plain DATA frames may bypass h2
        #: Set once the stream is over: None for OK, else the error (raised after
        #: every message received before it was handed out).
        self._ended = False
        self._error: SubscribeRpcError | None = None
        self._status: int | None = None
        self._message = ""

    # ------------------------------------------------------------------ grpcio-like API

    def __iter__(self) -> H2SubscribeCall:
        return self

    def __next__(self) -> api_pb2.Message:
        ready = self._ready
        i = self._next
        if i < len(ready):
            self._next = i + 1
            return ready[i]
        return self._fill()

    def read_batch(self) -> list[api_pb2.Message]:
        """Every decoded message not handed out yet, reading until there is at least one.

        Raises:
            StopIteration: the server ended the stream with OK.
            SubscribeRpcError: the stream failed or was cancelled, after every message
                received before that was handed out.
        """
        ready = self._ready
        i = self._next
        if i >= len(ready):
            self._fill()
            ready = self._ready
            i = 0
        self._ready = []
        self._next = 0
        return ready[i:] if i else ready

    def cancel(self) -> None:
        """End the call; a blocked ``next()`` raises CANCELLED. Idempotent."""
        with self._lock:
            self._cancelled = True
            sock = self._sock
            if sock is None:
                return
            if self._reading:
                # Wake the reader (it closes the socket); only the fd is touched, never
                # the TLS object the reader is using.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
            else:
                self._sock = None
                sock.close()

    def __del__(self) -> None:
        sock = self._sock
        if sock is not None:
            self._sock = None
            with contextlib.suppress(Exception):
                sock.close()

    # ------------------------------------------------------------------ reading

    def _fill(self) -> api_pb2.Message:
        """Read until a message is decoded or the stream ends."""
        self._ready = []
        self._next = 0
        while True:
            if self._ended:
                self._close()
                if self._error is not None:
                    raise self._error
                raise StopIteration
            if self._conn is None:
                self._connect()
            data = self._recv()
            try:
                self._receive(data)
            except h2.exceptions.ProtocolError as exc:
                self._end(_SC.UNAVAILABLE, f"HTTP/2 protocol error: {exc!r}")
            if self._outbuf:
                self._send_out()
            ready = self._ready
            if ready:
                self._next = 1
                return ready[0]

    def _recv(self) -> bytes:
        with self._lock:
            sock = self._sock
            if self._cancelled or sock is None:
                raise self._cancelled_error()
            self._reading = True
        try:
            data = self._recv_alive(sock)
        except _DeadConnection as exc:
            data = b""
            failure = str(exc)
        except OSError as exc:
            data = b""
            failure = f"receive from {self._address} failed: {exc}"
        else:
            failure = f"{self._address} closed the connection"
        with self._lock:
            self._reading = False
            if self._cancelled:
                self._sock = None
                sock.close()
                raise self._cancelled_error()
        if not data:
            self._close()
            self._ended = True
            self._error = SubscribeRpcError(_SC.UNAVAILABLE, failure)
            raise self._error
        return data

    def _recv_alive(self, sock: socket.socket) -> bytes:
        """One ``recv()``, PINGing a connection that stays silent (keepalive).

        An idle stream is legitimate (nothing is published), so silence alone ends
        nothing: after ``keepalive_interval`` seconds a PING goes out, and if nothing at
        all arrives within ``keepalive_timeout`` after it, the connection is dead (a
        crashed host, a black-holing firewall): the subscription resubscribes.

        Raises:
            _DeadConnection: no sign of life after a PING.
            OSError: the socket failed (or was closed by ``cancel``).
        """
        interval = self._options.keepalive_interval
        if interval is None:
            return sock.recv(_RECV_SIZE)
        pinged_at: float | None = None
        while True:
            wait = interval if pinged_at is None else self._options.keepalive_timeout
            sock.settimeout(wait)
            try:
                return sock.recv(_RECV_SIZE)
            except TimeoutError:
                if pinged_at is not None:
                    raise _DeadConnection(
                        f"{self._address} did not answer a keepalive PING within "
                        f"{self._options.keepalive_timeout}s: the connection is dead"
                    ) from None
            conn = self._conn
            if conn is None:
                raise _DeadConnection(f"{self._address}: no HTTP/2 connection")
            conn.ping(b"lb-alive")
            sock.settimeout(self._options.keepalive_timeout)
            sock.sendall(conn.data_to_send())
            pinged_at = time.monotonic()

    def _cancelled_error(self) -> SubscribeRpcError:
        self._ended = True
        self._error = SubscribeRpcError(_SC.CANCELLED, "subscription call cancelled")
        return self._error

    def _send_out(self) -> None:
        sock = self._sock
        data = bytes(self._outbuf)
        self._outbuf.clear()
        if sock is None:
            return
        try:
            sock.sendall(data)
        except OSError as exc:
            if not self._ended:
                self._end(_SC.UNAVAILABLE, f"send to {self._address} failed: {exc}")

    def _close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _receive(self, data: bytes) -> None:
        """Split ``data`` into frames: our stream's plain DATA frames are read here, the
        rest goes to h2 (only whole frames, so h2 never buffers anything between calls).

        The broker sends each message in a DATA frame of its own, so the inner loop takes
        runs of such frames with one ``unpack`` per frame (frame header and message prefix
        together) and only slices the message bytes out; the run is then decoded with
        one list comprehension. Anything else goes through the general path.
        """
        inbuf = self._inbuf
        if inbuf:
            inbuf += data
            buf: bytes | bytearray = inbuf
        else:
            buf = data
        size = len(buf)
        last_head = size - 14  # the last position a frame header + prefix fits
        pos = 0
        slow = -1  # start of a run of frames for h2
        sid = self._stream_id
        conn = self._conn
        assert conn is not None
        limit = conn.max_inbound_frame_size
        # Largest message the inner loop may take (a bigger one goes through _decode).
        cap = min(limit - 5, self._max_message)
        # Flags 0, our stream id, compressed flag 0: a single-message DATA frame.
        plain = b"\0" + sid.to_bytes(4, "big") + b"\0"
        consumed = 0
        rbuf = self._rbuf
        bodies: list[bytes | bytearray] = []
        add = bodies.append
        unpack = _FRAME_HEADER.unpack_from
        head = _DATA_HEAD.unpack_from
        fast = self._fast
        whole = fast and not rbuf  # frames start on message boundaries
        while size - pos >= 9:
            if whole and slow < 0:
                run = pos
                count = len(bodies)
                while pos <= last_head:
                    length_type, middle, mlen = head(buf, pos)
                    end = pos + 14 + mlen
                    if (
                        middle != plain
                        or length_type != (mlen + 5) << 8
                        or end > size
                        or mlen > cap
                    ):
                        break
                    add(buf[pos + 14 : end])
                    pos = end
                if pos != run:
                    consumed += pos - run - 9 * (len(bodies) - count)
                    continue
            if bodies:
                # Keep the order: what the general path decodes comes after the run.
                self._parse(bodies)
                fast = self._fast
                whole = fast and not rbuf
            length_type, flags, stream = unpack(buf, pos)
            length = length_type >> 8
            end = pos + 9 + length
            if end > size:
                break
            # Type 0 is DATA; flags 0x1 (END_STREAM) and 0x8 (PADDED) need h2.
            if length_type & 0xFF == 0 and not flags & 0x09 and stream == sid:
                if slow >= 0:
                    self._handle(conn.receive_data(bytes(buf[slow:pos])))
                    slow = -1
                    fast = self._fast
                    whole = fast and not rbuf
                if fast and length <= limit:
                    consumed += length
                    rbuf += buf[pos + 9 : end]
                    pos = end
                    self._decode()
                    fast = self._fast
                    whole = fast and not rbuf
                    continue
            if slow < 0:
                slow = pos
            pos = end
        if bodies:
            self._parse(bodies)
        if slow >= 0:
            self._handle(conn.receive_data(bytes(buf[slow:pos])))
        if inbuf:
            del inbuf[:pos]
        elif pos < size:
            inbuf += data[pos:]
        if consumed:
            self._credit += consumed
            if self._credit >= _CREDIT_AT and not self._ended:
                # Connection and stream windows, both (frames h2 did not see).
                credit = self._credit
                self._outbuf += _WINDOW_UPDATE.pack(0, 4, 8, 0, 0, credit)
                self._outbuf += _WINDOW_UPDATE.pack(0, 4, 8, 0, sid, credit)
                self._credit = 0

    def _parse(self, bodies: list[bytes | bytearray]) -> None:
        """Decode message bodies in order onto the ready list, then empty ``bodies``."""
        parse = api_pb2.Message.FromString
        try:
            self._ready += [parse(body) for body in bodies]  # type: ignore[arg-type]
        except DecodeError:
            ready = self._ready
            for body in bodies:
                try:
                    ready.append(parse(body))  # type: ignore[arg-type]
                except DecodeError as exc:
                    self._end(_SC.INTERNAL, f"bad message: {exc}")
                    break
        bodies.clear()

    def _decode(self) -> None:
        """Decode every whole message in the DATA buffer."""
        rbuf = self._rbuf
        size = len(rbuf)
        pos = 0
        ready = self._ready
        parse = api_pb2.Message.FromString
        while size - pos >= 5 and not self._ended:
            flag, length = _PREFIX.unpack_from(rbuf, pos)
            if flag:
                self._end(_SC.INTERNAL, "compressed message not asked for")
                break
            if length > self._max_message:
                # INTERNAL, not grpcio's RESOURCE_EXHAUSTED: a subscription reads that
                # as the end of a read-only partition and would stop without a word.
                self._end(
                    _SC.INTERNAL,
                    f"message of {length} bytes is larger than the limit ({self._max_message}; "
                    "raise it with grpc_options grpc.max_receive_message_length)",
                )
                break
            end = pos + 5 + length
            if end > size:
                break
            try:
                ready.append(parse(bytes(rbuf[pos + 5 : end])))
            except DecodeError as exc:
                self._end(_SC.INTERNAL, f"bad message: {exc}")
                break
            pos = end
        if pos:
            del rbuf[:pos]

    def _handle(self, events: list[h2.events.Event]) -> None:
        conn = self._conn
        assert conn is not None
        consumed = 0
        for event in events:
            kind = type(event)
            if kind is h2.events.DataReceived:
                assert isinstance(event, h2.events.DataReceived)
                consumed += event.flow_controlled_length or 0
                if event.data and not self._ended:
                    self._rbuf += event.data
                    self._decode()
            elif kind is h2.events.ResponseReceived:
                assert isinstance(event, h2.events.ResponseReceived)
                self._on_headers(event.headers or [])
            elif kind is h2.events.TrailersReceived:
                assert isinstance(event, h2.events.TrailersReceived)
                self._on_status(event.headers or [])
            elif kind is h2.events.StreamEnded:
                self._on_stream_ended()
            elif kind is h2.events.StreamReset:
                assert isinstance(event, h2.events.StreamReset)
                code = framing.RESET_CODES.get(int(event.error_code), _SC.INTERNAL)
                self._end(code, f"stream reset by the broker ({event.error_code!r})")
            elif kind is h2.events.ConnectionTerminated:
                assert isinstance(event, h2.events.ConnectionTerminated)
                self._end(_SC.UNAVAILABLE, f"the broker sent GOAWAY ({event.error_code!r})")
            # SETTINGS and PING are acknowledged by h2 itself (sent after this read).
        if consumed and not self._ended:
            conn.acknowledge_received_data(consumed, self._stream_id)
        self._outbuf += conn.data_to_send()

    def _on_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        status = fields.get(b":status", b"")
        code = framing.http_status_code(status)
        if code is not None:
            self._end(code, f"HTTP status {status.decode(errors='replace')}")
            return
        content_type = fields.get(b"content-type", b"")
        if not content_type.startswith(b"application/grpc"):
            shown = content_type.decode(errors="replace")
            self._end(_SC.UNKNOWN, f"not a gRPC response (content-type {shown!r})")
            return
        self._headers_seen = True
        self._fast = not self._ended
        if b"grpc-status" in fields:  # trailers-only response
            self._on_status(headers)

    def _on_status(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        raw = fields.get(b"grpc-status")
        if raw is not None:
            try:
                self._status = int(raw)
            except ValueError:
                self._status = _SC.UNKNOWN.value[0]
        message = fields.get(b"grpc-message")
        if message:
            self._message = urllib.parse.unquote_to_bytes(message).decode("utf-8", "replace")

    def _on_stream_ended(self) -> None:
        if self._ended:
            return
        if self._status is None:
            self._end(_SC.INTERNAL, "stream ended without grpc-status")
        elif self._rbuf:
            self._end(_SC.INTERNAL, "stream ended inside a message")
        elif self._status == 0:
            self._ended = True
            self._fast = False
        else:
            self._end(_CODES.get(self._status, _SC.UNKNOWN), self._message)

    def _end(self, code: grpc.StatusCode, details: str) -> None:
        # The first reason wins (e.g. trailers followed by the broker's RST_STREAM).
        if not self._ended:
            self._ended = True
            self._fast = False
            self._error = SubscribeRpcError(code, details)

    # ------------------------------------------------------------------ connecting

    def _connect(self) -> None:
        if self._cancelled:
            raise self._cancelled_error()
        options = self._options
        host, port = parse_address(self._address)
        tls = options.tls
        try:
            sock = socket.create_connection((host, port), timeout=options.rpc_timeout)
        except OSError as exc:
            self._ended = True
            self._error = SubscribeRpcError(
                _SC.UNAVAILABLE, f"cannot connect to {self._address}: {exc}"
            )
            raise self._error from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = tls_context(tls).wrap_socket(sock, server_hostname=tls.server_name or host)
                if sock.selected_alpn_protocol() != "h2":
                    raise OSError("the broker did not negotiate HTTP/2 (ALPN h2)")
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
            sid = conn.get_next_available_stream_id()
            authority = (tls.server_name if tls and tls.server_name else self._address).encode()
            conn.send_headers(
                sid,
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
            body = self._request.SerializeToString()
            conn.send_data(sid, _PREFIX.pack(0, len(body)) + body, end_stream=True)
            sock.sendall(conn.data_to_send())
            sock.settimeout(None)
        except (OSError, h2.exceptions.ProtocolError) as exc:
            sock.close()
            self._ended = True
            self._error = SubscribeRpcError(
                _SC.UNAVAILABLE, f"cannot open a stream to {self._address}: {exc}"
            )
            raise self._error from None
        with self._lock:
            if self._cancelled:
                sock.close()
                raise self._cancelled_error()
            self._sock = sock
        self._conn = conn
        self._stream_id = sid


def open_call(address: str, request: api_pb2.SubscribeRequest, options: ClientOptions) -> Any:
    """A new, not yet connected :class:`H2SubscribeCall` (the grpcio ``Subscribe`` stand-in).

    Thread-safe.
    """
    return H2SubscribeCall(address, request, options)
