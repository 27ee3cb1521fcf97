"""The receive side of a ``Subscribe`` call over HTTP/2: bytes in, wire messages out.

:class:`SubscribeReceiver` is what :class:`~liftbridge_sync._transport.h2_subscribe.\
H2SubscribeCall` does with the bytes one ``recv()`` returned, without any I/O: it splits
them into frames, takes the broker's plain single-message DATA frames of our stream out
of the byte stream before ``h2`` sees them (``h2`` spends ~10 µs of pure Python per
frame), decodes every whole gRPC message in bulk onto a ready list, hands everything
else to ``h2``, queues our own WINDOW_UPDATE frames for what ``h2`` did not see, and
turns headers, trailers, resets and GOAWAY into the call's end: a
:class:`~liftbridge_sync.errors.LiftbridgeError` mapped by :mod:`liftbridge_sync._wire.status`
(as opening the subscription if no message arrived before it, else as ending a running
one). Not thread-safe: only the thread iterating the call runs it.
"""

from __future__ import annotations

import contextlib
import struct
import urllib.parse

import grpc
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2 import framing
from liftbridge_sync._wire.status import CallContext, error_from_status
from liftbridge_sync.errors import LiftbridgeError

__all__ = ["SubscribeReceiver"]

_SC = grpc.StatusCode
# Module-level names for the hot decoding loop (one lookup less per message).
_PREFIX = framing.PREFIX
_FRAME_HEADER = framing.FRAME_HEADER
#: A DATA frame header followed by the gRPC prefix of the message it starts: length and
#: type; flags, stream id and compressed flag (compared as bytes); message length.
_DATA_HEAD = struct.Struct(">I6sI")
#: WINDOW_UPDATE frame: length (24 bits) as 16+8, type, flags, stream id, increment.
_WINDOW_UPDATE = struct.Struct(">HBBBII")
#: Return the window of the DATA frames we read ourselves in steps of this.
_CREDIT_AT = 256 * 1024

_CODES = framing.CODES


class SubscribeReceiver:
    """Decoding state of one Subscribe stream (the receiving half of the call).

    Not thread-safe: only the iterating thread feeds it.
    """

    def __init__(self, max_message: int) -> None:
        self._max_message = max_message
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
        self._error: LiftbridgeError | None = None
        #: A message was handed out (the server's handshake): a later end is a running
        #: subscription's, not a refused open.
        self._received = False
        self._status: int | None = None
        self._message = ""

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
            if length > limit:
                # Refused from its header on: the broker cannot make us buffer 16 MiB.
                self._frame_too_large(length, limit)
                pos = size
                slow = -1
                break
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

    def _frame_too_large(self, length: int, limit: int) -> None:
        """End the call on a frame longer than we allow (RFC 9113 §4.2: a connection
        error, ``GOAWAY(FRAME_SIZE_ERROR)``); the subscription resubscribes."""
        conn = self._conn
        assert conn is not None
        with contextlib.suppress(h2.exceptions.ProtocolError):
            conn.close_connection(error_code=h2.errors.ErrorCodes.FRAME_SIZE_ERROR)
            self._outbuf += conn.data_to_send()
        self._end(_SC.UNAVAILABLE, f"the broker sent a {length}-byte frame (limit {limit})")

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
                    "raise it with the option max_receive_message_size)",
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
            self._fail(code, details)

    def _fail(self, code: grpc.StatusCode, details: str) -> LiftbridgeError:
        """End the call with the error of status ``code``, whatever ended it before."""
        self._ended = True
        self._fast = False
        # Every message decoded before the end is handed out before the error is raised.
        opened = self._received or self._next < len(self._ready)
        context = CallContext.SUBSCRIPTION if opened else CallContext.SUBSCRIBE_OPEN
        self._error = error = error_from_status(code, details, context)
        return error
