"""``PublishAsync`` over our own HTTP/2 connection (the default ``"h2"`` publish transport).

grpcio's public API writes one HTTP/2 DATA frame with one syscall per message and hands
every message across several threads (performance.md §4, §10). This transport owns the
connection instead: callers append framed requests to a list under a short lock, and
one I/O thread, woken only on the idle → busy transition, writes everything pending
with as few DATA frames as flow control allows and one ``send()``. Responses are
decoded in bulk from each ``recv()``: our stream's plain DATA frames are cut out by
:mod:`.framing` and never reach the ``h2`` state machine (which spends ~10 µs of pure
Python per frame); ``h2`` handles the rest (HPACK headers and trailers, SETTINGS, PING,
GOAWAY, RST_STREAM, outbound flow control).

Dead peers: a PING goes out when the publisher asks (:meth:`H2PublishStream.probe`,
after an ack timeout) and, with ``grpc.keepalive_time_ms`` in ``grpc_options``, after
that long without reading anything; nothing read within ``grpc.keepalive_timeout_ms``
(default 20 s) after it ends the connection as unavailable, so the publisher reconnects.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import ssl
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.h2.framing import (
    CODES,
    DATA,
    END_STREAM,
    HTTP_CODES,
    MAX_FRAME_SIZE,
    PADDED,
    PREFIX,
    RESET_CODES,
    FrameError,
    grpc_status,
    ping_frame,
    split_frames,
    split_messages,
    window_update,
)
from liftbridge_sync._transport.publish_stream import (
    PublishStream,
    StreamClosed,
    StreamEvent,
    StreamResponse,
    StreamResponses,
    StreamSent,
)
from liftbridge_sync._wire.status import CallContext, error_from_status
from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError
from liftbridge_sync.options import ClientOptions, TLSOptions, parse_address

__all__ = ["H2PublishStream", "open_h2_stream"]

_log = logging.getLogger(__name__)

_PATH = b"/proto.API/PublishAsync"
#: One ``recv()``; a full buffer means more may be waiting, so read again.
_RECV_SIZE = 256 * 1024
#: Our receive window (stream and connection): acks are small, so this is only about
#: sending fewer WINDOW_UPDATE frames.
_RECV_WINDOW = 4 << 20
#: Return fast-path DATA window in steps of this (far below the 4 MiB windows).
_CREDIT_AT = 64 * 1024
#: Compact the unsent buffer once this much of its head has been framed.
_COMPACT_AT = 1 << 20
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


_GO_ON = object()  # a loop turn that did not end the stream


class _ConnectionLost(Exception):
    """The socket failed or the broker closed it; mapped to BrokerUnavailableError."""


def _unavailable(message: str) -> BrokerUnavailableError:
    return BrokerUnavailableError(f"publish stream: {message}", code="UNAVAILABLE")


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


class H2PublishStream:
    """One ``PublishAsync`` call on its own HTTP/2 connection.

    ``send_framed``, ``close``, ``cancel`` and ``probe`` only touch a list and a few
    flags under a short lock and wake the I/O thread (``liftbridge-publish-io``) when it
    is idle; that thread does all socket and HTTP/2 work and emits every event, ending
    with exactly one :class:`StreamClosed`. Thread-safe.
    """

    def __init__(
        self,
        sock: socket.socket,
        conn: h2.connection.H2Connection,
        stream_id: int,
        epoch: int,
        on_event: Callable[[StreamEvent], None],
        *,
        keepalive: tuple[float | None, float] = (None, 20.0),
    ) -> None:
        self._sock = sock
        self._conn = conn
        self._stream_id = stream_id
        self._epoch = epoch
        self._on_event = on_event
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._ping_every, self._ping_wait = keepalive

        # Shared with callers, guarded by _lock.
        self._lock = threading.Lock()
        #: Held by whoever does socket and h2 work: the I/O thread between selects, or a
        #: caller writing directly (only ever acquired without blocking under _lock).
        self._io_lock = threading.Lock()
        self._queue: list[bytes] = []
        self._queued_bytes = 0  # total message bytes ever queued
        self._notes: list[tuple[int, str]] = []  # (end byte offset, correlation id)
        self._signalled = False  # a wake-up byte is on its way to the I/O thread
        self._close_requested = False
        self._cancel_requested = False
        self._probe_requested = False
        self._done = False  # the I/O thread has finished; sends are dropped

        # I/O thread only.
        self._unsent = bytearray()  # message bytes not yet given to h2
        self._unsent_pos = 0
        self._framed_bytes = 0  # message bytes given to h2 (and so to the socket buffer)
        self._waiting_notes: deque[tuple[int, str]] = deque()
        self._outbuf = bytearray()  # output the socket did not take yet
        self._inbuf = bytearray()  # received bytes not yet forming a whole frame
        self._rbuf = bytearray()  # response bytes not yet forming a whole message
        self._parsed: list[api_pb2.PublishResponse] = []  # emitted once per recv()
        self._headers_seen = False  # a valid response HEADERS frame arrived
        self._credit = 0  # bytes of fast-path DATA not yet returned with WINDOW_UPDATE
        self._closing = False
        self._half_closed = False
        self._ended = False
        self._error: LiftbridgeError | None = None
        self._status: int | None = None
        self._message = ""
        self._last_read = time.monotonic()
        self._ping_deadline: float | None = None  # a PING is out: read something by then

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

    def send_framed(self, framed: bytes, note: str | None = None, direct: bool = False) -> None:
        """Queue a framed request; never blocks. Dropped once the stream has ended.

        With ``direct`` (a caller about to wait for the answer) and the I/O thread idle,
        the caller writes it itself: no wake-up of the I/O thread on the way out.
        """
        with self._lock:
            if self._done or self._close_requested:
                return  # the publisher re-sends pending requests on its next stream
            self._queue.append(framed)
            self._queued_bytes += len(framed)
            if note is not None:
                self._notes.append((self._queued_bytes, note))
            if self._signalled:
                return
            if not (direct and self._io_lock.acquire(blocking=False)):
                self._wake()
                return
        self._write_here()

    def _write_here(self) -> None:
        """Frame and send what is queued on the calling thread; holds ``_io_lock``."""
        try:
            if not self._done:
                self._take_queue()
                self._pump()
                self._flush()
            failed = False
        except Exception:  # the I/O thread sees the broken socket and ends the stream
            failed = True
        finally:
            self._io_lock.release()
        if failed:
            with self._lock:
                if not self._signalled and not self._done:
                    self._wake()

    def send_many(self, framed: list[bytes]) -> None:
        """Queue several framed requests at once (see :meth:`send_framed`)."""
        with self._lock:
            if self._done or self._close_requested:
                return
            self._queue += framed
            self._queued_bytes += sum(map(len, framed))
            if not self._signalled:
                self._wake()

    def send(self, request: api_pb2.PublishRequest, *, notify_sent: bool = False) -> None:
        """Serialize and queue ``request`` (see :meth:`send_framed`)."""
        data = request.SerializeToString()
        framed = PREFIX.pack(0, len(data)) + data
        self.send_framed(framed, request.correlationId if notify_sent else None)

    def probe(self) -> None:
        """Send a PING; no answer within the keepalive timeout ends the connection."""
        with self._lock:
            if self._done or self._probe_requested:
                return
            self._probe_requested = True
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
        except FrameError as exc:
            error = _unavailable(f"HTTP/2 framing error: {exc}")
        except h2.exceptions.ProtocolError as exc:
            error = _unavailable(f"HTTP/2 protocol error: {exc!r}")
        except Exception as exc:  # pragma: no cover - a bug must still end the stream
            _log.exception("publish I/O thread failed")
            error = _unavailable(f"transport failure: {exc!r}")
        finally:
            with self._io_lock:
                with self._lock:
                    self._done = True
                self._selector.close()
                self._sock.close()
                self._wake_r.close()
                self._wake_w.close()
        self._on_event(StreamClosed(self._epoch, error))

    def _timeout(self) -> float | None:
        """Seconds until the next keepalive step (``None``: none planned)."""
        if self._ping_deadline is not None:
            return max(0.0, self._ping_deadline - time.monotonic())
        if self._ping_every is not None:
            return max(0.0, self._last_read + self._ping_every - time.monotonic())
        return None

    def _keepalive(self) -> None:
        now = time.monotonic()
        if self._ping_deadline is not None:
            if now >= self._ping_deadline:
                raise _ConnectionLost(
                    f"no answer from the broker within {self._ping_wait:g}s of a PING"
                )
        elif self._ping_every is not None and now >= self._last_read + self._ping_every:
            self._ping()

    def _ping(self) -> None:
        if self._ping_deadline is None:
            self._outbuf += ping_frame(os.urandom(8))
            self._ping_deadline = time.monotonic() + self._ping_wait

    def _loop(self) -> LiftbridgeError | None:
        select = self._selector.select
        sock = self._sock
        while True:
            events = select(self._timeout())
            with self._io_lock:
                result = self._step(events, sock)
            if result is not _GO_ON:
                return result  # type: ignore[return-value]

    def _step(self, events: list[tuple[selectors.SelectorKey, int]], sock: socket.socket) -> object:
        """One loop turn under ``_io_lock``: the stream's end (error or ``None``) or
        ``_GO_ON``."""
        for key, mask in events:
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
                self._conn.reset_stream(self._stream_id, 0x8)  # CANCEL
            self._goodbye()
            return error_from_status(
                grpc.StatusCode.CANCELLED, "publish stream cancelled", CallContext.GENERIC
            )
        if self._ping_every is not None or self._ping_deadline is not None:
            self._keepalive()
        self._take_queue()
        self._pump()
        if self._closing and not self._half_closed and self._unsent_pos == len(self._unsent):
            # Everything queued before close() has been framed: END_STREAM after it.
            self._half_closed = True
            self._conn.end_stream(self._stream_id)
        self._flush()
        return _GO_ON

    def _take_queue(self) -> None:
        with self._lock:
            batch = self._queue
            notes = self._notes
            closing = self._close_requested
            probe = self._probe_requested
            if batch:
                self._queue = []
            if notes:
                self._notes = []
            self._probe_requested = False
            self._signalled = False
        if batch:
            self._unsent += b"".join(batch)
        if notes:
            self._waiting_notes.extend(notes)
        if closing:
            self._closing = True
        if probe:
            self._ping()

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
            if self._ping_every is not None or self._ping_deadline is not None:
                self._last_read = time.monotonic()
                self._ping_deadline = None
            self._receive(data)
            if self._ended:
                return
            if len(data) < _RECV_SIZE and not (self._tls and sock.pending()):  # type: ignore[attr-defined]
                return

    def _receive(self, data: bytes) -> None:
        """Split ``data`` into frames: our stream's plain DATA frames are read here, the
        rest goes to h2 (whole frames only, so its buffer holds nothing between calls).

        h2 never sees the fast-path frames, so its own flow-control accounting stays
        consistent; their window is returned by our own WINDOW_UPDATE frames.
        """
        inbuf = self._inbuf
        inbuf += data
        frames, consumed_to = split_frames(inbuf, MAX_FRAME_SIZE)
        rbuf = self._rbuf
        sid = self._stream_id
        fast = self._headers_seen and not self._ended
        slow = -1  # start of a run of frames for h2
        consumed = 0
        parsed = self._parsed
        parse = api_pb2.PublishResponse.FromString
        unpack = PREFIX.unpack_from
        try:
            for kind, flags, stream, start, end in frames:
                # Flags END_STREAM and PADDED need h2.
                if kind == DATA and not flags & (END_STREAM | PADDED) and stream == sid:
                    if slow >= 0:
                        self._handle(self._conn.receive_data(bytes(inbuf[slow : start - 9])))
                        slow = -1
                        fast = self._headers_seen and not self._ended
                    if fast:
                        consumed += end - start
                        # The broker writes one response per frame: parse it in place.
                        if (
                            not rbuf
                            and end - start >= 5
                            and unpack(inbuf, start)
                            == (
                                0,
                                end - start - 5,
                            )
                        ):
                            parsed.append(parse(bytes(inbuf[start + 5 : end])))
                        else:
                            rbuf += inbuf[start:end]
                            if len(rbuf) >= 5:
                                self._decode()
                        continue
                if slow < 0:
                    slow = start - 9
        except DecodeError as exc:
            self._end(error_from_status(grpc.StatusCode.INTERNAL, f"bad response: {exc}"))
        if slow >= 0 and not self._ended:
            self._handle(self._conn.receive_data(bytes(inbuf[slow:consumed_to])))
        if consumed_to:
            del inbuf[:consumed_to]
        if consumed:
            self._credit += consumed
            if self._credit >= _CREDIT_AT and not self._ended:
                # Connection and stream windows, both (frames h2 did not see).
                self._outbuf += window_update(0, self._credit) + window_update(sid, self._credit)
                self._credit = 0
        if parsed:
            self._parsed = []
            if len(parsed) == 1:
                self._on_event(StreamResponse(self._epoch, parsed[0]))
            else:
                self._on_event(StreamResponses(self._epoch, parsed))

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
                code = RESET_CODES.get(int(event.error_code or 0), grpc.StatusCode.INTERNAL)
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
        try:
            messages, pos = split_messages(rbuf)
        except FrameError as exc:
            code = (
                grpc.StatusCode.INTERNAL
                if exc.code == "INTERNAL"
                else grpc.StatusCode.RESOURCE_EXHAUSTED
            )
            self._end(error_from_status(code, str(exc)))
            return
        if pos:
            del rbuf[:pos]
        parse = api_pb2.PublishResponse.FromString
        try:
            self._parsed += [parse(message) for message in messages]
        except DecodeError as exc:
            self._end(error_from_status(grpc.StatusCode.INTERNAL, f"bad response: {exc}"))

    def _on_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        status = fields.get(b":status", b"")
        if status != b"200":
            try:
                http = int(status)
            except ValueError:
                http = 0
            code = HTTP_CODES.get(http, grpc.StatusCode.UNKNOWN)
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
        status, message = grpc_status(dict(headers))
        if status is not None:
            self._status = status
        if message:
            self._message = message

    def _final_error(self) -> LiftbridgeError | None:
        if self._status is None:
            return error_from_status(grpc.StatusCode.INTERNAL, "stream ended without grpc-status")
        if self._status == 0:
            return None
        code = CODES.get(self._status, grpc.StatusCode.UNKNOWN)
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
    """The ``"h2"`` :data:`~liftbridge_sync._transport.publish_stream.StreamOpener`.

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
        return H2PublishStream(
            sock, conn, stream_id, epoch, on_event, keepalive=_keepalive(options)
        )
    except LiftbridgeError:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        raise _unavailable(f"cannot open a stream to {address}: {exc}") from exc
