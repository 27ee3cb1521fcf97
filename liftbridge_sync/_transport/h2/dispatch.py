"""One gRPC stream's inbound HTTP/2, for publish and subscribe alike: bytes in; message
bodies, the frames to answer with and the stream's end out.

:class:`StreamDispatch` is the one event dispatch of both h2 transports (the publish
stream's :class:`~.responses.ResponseReader` and the Subscribe call's
:class:`~.subscribe_receiver.SubscribeReceiver` each compose one, with their
:class:`MessageCodec`). Per received chunk it:

* cuts whole frames out of the byte stream, refusing a frame longer than the maximum
  frame size we announced as soon as its 9-byte header is in (``GOAWAY(FRAME_SIZE_ERROR)``:
  the broker cannot make us buffer 16 MiB), and checking RFC 9113's framing rules for
  every frame but plain DATA (:func:`.framing.split_frames`'s checks);
* takes the broker's plain DATA frames of our stream out before ``h2`` sees them
  (``h2`` spends ~10 µs of pure Python per frame): runs of single-message frames go to
  the codec in bulk (or to its C scanner), other DATA bytes are decoded from a message
  buffer;
* answers PING and empty SETTINGS itself, as ``h2`` would (a broker's flood of them must
  not cost ~10 µs each), keeps a graceful GOAWAY that still covers our stream from
  ``h2`` when asked to (:attr:`draining`; the stream goes on until the broker ends it),
  discards ALTSVC frames (an extension we do not support; ``h2`` would parse them),
  adds the WINDOW_UPDATE increments the C scanner summed to ``h2``'s send windows, and
  hands every other frame to ``h2``, whose events (headers, trailers, end, RST_STREAM,
  GOAWAY) end the stream with the first reason;
* returns the flow-control window of the DATA frames ``h2`` did not see with its own
  WINDOW_UPDATE frames, and checks that the broker kept within the window we gave it
  (more is a ``FLOW_CONTROL_ERROR`` that ends the connection). Because the window is
  returned as soon as bytes are read, that check can only fire when the DATA read
  since our last WINDOW_UPDATE outgrows the window (see
  :meth:`StreamDispatch._count_credit`).

Frames to send (window updates, PING and SETTINGS acknowledgements, our GOAWAY) collect
in :attr:`out`; ``h2``'s own output stays in ``h2`` for the connection to send. Used by
one thread at a time (the publish connection's I/O lock holder, the subscription's
iterating thread): not thread-safe.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from typing import Protocol

import grpc
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
from h2.connection import ConnectionState
from h2.stream import StreamState

from liftbridge_sync._transport.h2.framing import (
    ACK,
    ALTSVC,
    CODES,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PUSH_PROMISE,
    RESET_CODES,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    check_frame,
    grpc_status,
    http_status_code,
    window_update,
    without_reserved_bits,
)
from liftbridge_sync.errors import LiftbridgeError

__all__ = ["MAX_WINDOW", "MessageCodec", "Scanned", "StreamDispatch"]

#: The largest flow-control window HTTP/2 allows.
MAX_WINDOW = 2**31 - 1
#: h2 events of a stream the broker opened: a connection error for a gRPC client.
_STREAM_OPENED = (h2.events.RequestReceived, h2.events.PushedStreamReceived)

#: Frames that may not arrive on an idle stream (RFC 9113 §5.1: only HEADERS and
#: PRIORITY may); h2 takes a RST_STREAM there without a word.
_NOT_ON_IDLE = frozenset({DATA, RST_STREAM, WINDOW_UPDATE})
#: Stream states in which h2 takes a WINDOW_UPDATE by just adding to the window.
_UPDATABLE = (StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL, StreamState.HALF_CLOSED_REMOTE)
#: A DATA frame header followed by the gRPC prefix of the message it starts: length and
#: type; flags, stream id and compressed flag (compared as bytes); message length.
_DATA_HEAD = struct.Struct(">I6sI")
_STREAM_ID = 0x7FFFFFFF
#: The acknowledgement of an empty SETTINGS frame, and the head of a PING's.
_SETTINGS_ACK = FRAME_HEADER.pack(SETTINGS, ACK, 0)
_PING_ACK = FRAME_HEADER.pack(8 << 8 | PING, ACK, 0)

#: What a C scanner read from a run of frames: where it stopped, the bytes of DATA
#: payload it took, frames for ``h2`` (or ``None``), PING answers (or ``None``), and the
#: summed WINDOW_UPDATE increments (connection, stream, the frames) or ``None``.
Scanned = tuple[int, int, bytes | None, bytes | None, tuple[int, int, bytes] | None]


class MessageCodec(Protocol):
    """What one direction's messages are: the decoding half a dispatch hands bytes to."""

    #: Reads a run of frames from a position in C (``None``: the dispatch's Python loop).
    scan: Callable[[bytes | bytearray, int], Scanned] | None

    def bodies(self, bodies: list[bytes | bytearray]) -> None:
        """Decode whole message bodies (prefix removed), in order."""

    def messages(self, rbuf: bytearray) -> None:
        """Decode every whole length-prefixed message at the start of ``rbuf``, and
        remove them from it."""


class StreamDispatch:
    """Stream ``stream_id``'s inbound side of connection ``conn`` (see the module).

    Not thread-safe: one reading thread at a time.
    """

    def __init__(
        self,
        conn: h2.connection.H2Connection,
        stream_id: int,
        codec: MessageCodec,
        *,
        max_message: int,
        credit_at: int,
        fail: Callable[[grpc.StatusCode, str], LiftbridgeError],
        lost: Callable[[str], LiftbridgeError],
        keep_graceful: bool,
    ) -> None:
        self._conn = conn
        self._stream_id = stream_id
        self._codec = codec
        self._max_message = max_message
        #: Return fast-path DATA window in steps of this.
        self._credit_at = credit_at
        #: The error of a status (code, details), and of a connection gone (details).
        self._fail = fail
        self._lost = lost
        self._keep_graceful = keep_graceful
        #: Flags 0, our stream id, compressed flag 0: a single-message DATA frame.
        self._plain = b"\0" + stream_id.to_bytes(4, "big") + b"\0"
        self._inbuf = bytearray()  # received bytes not yet forming a whole frame
        #: DATA bytes not yet forming a whole message (the codec takes what is whole).
        self.rbuf = bytearray()
        self._credit = 0  # bytes of fast-path DATA not yet returned with WINDOW_UPDATE
        self._status: int | None = None
        self._message = ""
        #: Frames to send (WINDOW_UPDATE, PING and SETTINGS ACKs, GOAWAY); the owner
        #: sends and clears them.
        self.out = bytearray()
        #: Plain DATA frames may bypass h2 (valid response headers, stream not over).
        self.fast = False
        #: A header block h2 has begun without END_HEADERS: until its CONTINUATION ends
        #: it, every frame goes to h2, which refuses any other (RFC 9113 §6.10).
        self._open_block = False
        #: The broker sent a graceful GOAWAY covering our stream (see :meth:`_graceful`).
        self.draining = False
        #: The stream has ended (``error``: why; ``None`` for a clean end).
        self.ended = False
        self.error: LiftbridgeError | None = None

    # ------------------------------------------------------------------ frames

    def receive(self, data: bytes) -> int:
        """Take ``data``: our stream's plain DATA frames are read here, the rest goes to
        h2 (whole frames only, so h2 never buffers anything between calls). Returns the
        payload bytes of the DATA frames read here.

        The broker sends each message in a DATA frame of its own, so runs of such
        frames are taken with one ``unpack`` per frame (frame header and message prefix
        together) and decoded together (or by the codec's C scanner).

        Raises:
            FrameError: framing the broker should never send.
            h2.exceptions.ProtocolError: what h2 refuses.
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
        limit = self._conn.max_inbound_frame_size
        # Largest message a run may take (a bigger one goes through the message buffer).
        cap = min(limit - 5, self._max_message)
        plain = self._plain
        consumed = 0
        rbuf = self.rbuf
        codec = self._codec
        scan = codec.scan
        bodies: list[bytes | bytearray] = []
        add = bodies.append
        unpack = FRAME_HEADER.unpack_from
        head = _DATA_HEAD.unpack_from
        out = self.out
        fast = self.fast
        whole = fast and not rbuf  # frames start on message boundaries
        while size - pos >= 9:
            # A run starts at a DATA frame (the C scanner also takes control frames).
            if whole and slow < 0 and (scan is not None or buf[pos + 3] == DATA):
                if scan is not None:
                    at, taken, control, pongs, windows = scan(buf, pos)
                    if at != pos:
                        consumed += taken
                        pos = at
                        if pongs:  # PING ACKs answering the broker's PINGs
                            out += pongs
                        if control:  # SETTINGS (and odd WINDOW_UPDATEs) for h2
                            self._to_h2(control)
                        if windows is not None and not self.ended:
                            self._add_windows(*windows)
                        fast = self.fast
                        whole = fast and not rbuf
                        continue
                else:
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
                codec.bodies(bodies)
                bodies.clear()
                fast = self.fast
                whole = fast and not rbuf
            length_type, flags, stream = unpack(buf, pos)
            length = length_type >> 8
            if length > limit:
                self._refuse(
                    h2.errors.ErrorCodes.FRAME_SIZE_ERROR,
                    f"the broker sent a {length}-byte frame (limit {limit})",
                )
                pos = size
                slow = -1
                break
            end = pos + 9 + length
            if end > size:
                break
            kind = length_type & 0xFF
            stream &= _STREAM_ID
            if kind == DATA and not flags & (END_STREAM | PADDED) and stream == sid:
                if slow >= 0:
                    self._to_h2(buf[slow:pos])
                    slow = -1
                    fast = self.fast
                if fast:
                    consumed += length
                    rbuf += buf[pos + 9 : end]
                    pos = end
                    if len(rbuf) >= 5:
                        codec.messages(rbuf)
                    fast = self.fast
                    whole = fast and not rbuf
                    continue
            elif (
                fast
                and stream == 0
                and not flags & ACK
                and ((kind == PING and length == 8) or (kind == SETTINGS and not length))
            ):
                # Answered here, as the C scanner does: no state for h2 to keep, and h2
                # takes ~10 us per frame (a broker's flood must not stall us).
                if slow >= 0:
                    self._to_h2(buf[slow:pos])
                    slow = -1
                    fast = self.fast
                    whole = fast and not rbuf
                out += _SETTINGS_ACK if kind == SETTINGS else _PING_ACK + buf[pos + 9 : end]
                pos = end
                continue
            else:
                check_frame(kind, flags, stream, length, buf, pos + 9)
                if kind in _NOT_ON_IDLE and stream and self._idle(stream):
                    if slow >= 0:  # what came before it first
                        self._to_h2(buf[slow:pos])
                        slow = -1
                    if not self.ended:
                        self._refuse(
                            h2.errors.ErrorCodes.PROTOCOL_ERROR,
                            f"the broker sent frame type {kind} on stream {stream}, "
                            "which neither side opened",
                        )
                    pos = size
                    break
                if kind in (HEADERS, PUSH_PROMISE) and not flags & END_HEADERS:
                    self._open_block = True
                    self.fast = fast = whole = False  # restored by the response headers
                elif kind == CONTINUATION and flags & END_HEADERS:
                    self._open_block = False
                if not self._open_block and (
                    # ALTSVC: discarded, as every extension we do not support must be
                    # (RFC 9113 §5.5); h2 parses it and fails the connection on a short one.
                    kind == ALTSVC
                    or (kind == GOAWAY and self._keep_graceful and self._graceful(buf, pos + 9))
                ):
                    if slow >= 0:  # what came before it goes to h2 first
                        self._to_h2(buf[slow:pos])
                        slow = -1
                        fast = self.fast
                        whole = fast and not rbuf
                    pos = end
                    continue
                if kind == GOAWAY and not self._open_block:
                    # h2 refuses every frame after a GOAWAY it took (its connection is
                    # CLOSED), but the broker may go on sending: gRPC's graceful
                    # shutdown is GOAWAY then PING (RFC 9113 §6.8 allows it). The
                    # GOAWAY goes to h2 now, ending the run; _to_h2 drops what follows.
                    self._to_h2(buf[slow if slow >= 0 else pos : end])
                    slow = -1
                    fast = self.fast
                    whole = fast and not rbuf
                    pos = end
                    continue
            if slow < 0:
                slow = pos
            pos = end
        if bodies:
            codec.bodies(bodies)
        if slow >= 0 and not self.ended:
            self._to_h2(buf[slow:pos])
        if inbuf:
            del inbuf[:pos]
        elif pos < size:
            inbuf += data[pos:]
        if consumed:
            self._count_credit(consumed)
        return consumed

    def _count_credit(self, consumed: int) -> None:
        """Count DATA bytes h2 did not see against the window we gave the broker, and
        return them with our own WINDOW_UPDATE frames in steps of ``credit_at``.

        The broker may send what h2's windows (which know only the frames h2 saw) allow
        less what we read ourselves and have not returned yet; more is a flow-control
        error (RFC 9113 §6.9.1). The window is returned as soon as the bytes are read
        (every ``credit_at`` bytes), so the check fires only when what was read since
        our last WINDOW_UPDATE (under ``credit_at`` plus one read) outgrows the window:
        never with the transports' 4 MiB windows (steps of 64 or 256 KiB, reads of
        120 KiB), whatever the broker sends; with a smaller window, a broker that
        overruns it. Either way, what a broker ignoring the window sends waits in the
        kernel's socket buffers, never in ours (one read at a time, under the limits).
        """
        credit = self._credit + consumed
        self._credit = credit
        if self.ended:
            return
        conn = self._conn
        stream = conn.streams.get(self._stream_id)
        room = conn.inbound_flow_control_window
        if stream is not None:
            room = min(room, stream.inbound_flow_control_window)
        if credit > room:
            self._refuse(
                h2.errors.ErrorCodes.FLOW_CONTROL_ERROR,
                f"the broker sent {credit - room} bytes beyond the flow-control window",
            )
        elif credit >= self._credit_at:
            # Connection and stream windows, both (frames h2 did not see).
            self.out += window_update(0, credit) + window_update(self._stream_id, credit)
            self._credit = 0

    def _idle(self, stream: int) -> bool:
        """Whether ``stream`` is one neither side has opened (RFC 9113 §5.1.1: ids above
        the highest each side used; ours are odd, the broker's even)."""
        conn = self._conn
        highest = conn.highest_outbound_stream_id if stream % 2 else conn.highest_inbound_stream_id
        return stream > highest

    def _refuse(self, code: h2.errors.ErrorCodes, why: str) -> None:
        """End the connection for a connection error of the broker's (RFC 9113 §5.4.1:
        GOAWAY with ``code``); the stream ends as unavailable."""
        conn = self._conn
        with contextlib.suppress(h2.exceptions.ProtocolError):
            conn.close_connection(error_code=code)
            self.out += conn.data_to_send()
        self.end(self._lost(why))

    def _graceful(self, buf: bytes | bytearray, start: int) -> bool:
        """Whether a GOAWAY frame is a graceful shutdown that still covers our stream
        (NO_ERROR, last stream id at or above ours): then the broker answers what it was
        sent and ends the stream itself, so the frame is kept from h2 (which would
        refuse every later frame of the connection) and only :attr:`draining` is set.
        Any other GOAWAY goes to h2 and ends the stream."""
        last_stream = int.from_bytes(buf[start : start + 4], "big") & _STREAM_ID
        code = int.from_bytes(buf[start + 4 : start + 8], "big")
        if code != 0 or last_stream < self._stream_id:
            return False
        self.draining = True
        return True

    def _add_windows(self, connection: int, stream: int, frames: bytes) -> None:
        """Add the increments of WINDOW_UPDATE frames to ``h2``'s send windows, as its
        own handling of them would (it parses a frame in tens of microseconds, and the
        broker sends them all the time); ``frames`` go to ``h2`` itself when its state
        leaves the decision to it: a closing connection or stream, or a window that
        would overflow (a flow-control error)."""
        conn = self._conn
        target = conn.streams.get(self._stream_id) if stream else None
        if conn.state_machine.state is ConnectionState.CLIENT_OPEN and (
            not stream or (target is not None and target.state_machine.state in _UPDATABLE)
        ):
            connection_window = conn.outbound_flow_control_window + connection
            stream_window = target.outbound_flow_control_window + stream if target else 0
            if connection_window <= MAX_WINDOW and stream_window <= MAX_WINDOW:
                conn.outbound_flow_control_window = connection_window
                if target is not None:
                    target.outbound_flow_control_window = stream_window
                return
        self._to_h2(frames)

    # ------------------------------------------------------------------ h2 events

    def _to_h2(self, frames: bytes | bytearray) -> None:
        """Hand whole frames to h2 and act on its events.

        Nothing goes to h2 once its connection is CLOSED (a GOAWAY either side sent):
        h2 would refuse any frame but another GOAWAY as a protocol error, while the
        stream has already ended with the GOAWAY's reason. A WINDOW_UPDATE's reserved
        bit is cleared first (RFC 9113 §6.9: ignored; h2 refuses it).
        """
        if self._conn.state_machine.state is ConnectionState.CLOSED:
            return
        consumed = 0
        rbuf = self.rbuf
        ours = self._stream_id
        # The reserved bit of a WINDOW_UPDATE is ignored, as the C scanner does.
        for event in self._conn.receive_data(bytes(without_reserved_bits(frames))):
            kind = type(event)
            if kind in _STREAM_OPENED:
                # h2, as a client, takes a stream the broker opens (even ids) without
                # complaint; a gRPC server never opens one (RFC 9113 §5.1.1, push off).
                self._refuse(
                    h2.errors.ErrorCodes.PROTOCOL_ERROR,
                    f"the broker opened stream {getattr(event, 'stream_id', '?')}",
                )
                return
            if getattr(event, "stream_id", ours) not in (ours, 0):
                continue  # another stream's (one h2 closed already): not ours to act on
            if kind is h2.events.DataReceived:
                assert isinstance(event, h2.events.DataReceived)
                consumed += event.flow_controlled_length or 0
                if event.data and not self.ended:
                    rbuf += event.data
                    if len(rbuf) >= 5:
                        self._codec.messages(rbuf)
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
                code = RESET_CODES.get(int(event.error_code or 0), grpc.StatusCode.INTERNAL)
                self.end(self._fail(code, f"stream reset by the broker ({event.error_code!r})"))
            elif kind is h2.events.ConnectionTerminated:
                assert isinstance(event, h2.events.ConnectionTerminated)
                self.end(self._lost(_goaway_reason(event)))
            # SETTINGS and PING are acknowledged by h2 itself (its output, sent by the
            # connection); WindowUpdated needs nothing: the writer looks at the windows.
        if consumed and not self.ended:
            # One WINDOW_UPDATE decision per read instead of one per frame.
            self._conn.acknowledge_received_data(consumed, self._stream_id)

    def _on_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        status = fields.get(b":status", b"")
        code = http_status_code(status)
        if code is not None:
            self.end(self._fail(code, f"HTTP status {status.decode(errors='replace')}"))
            return
        content_type = fields.get(b"content-type", b"")
        if not content_type.startswith(b"application/grpc"):
            shown = content_type.decode(errors="replace")
            self.end(
                self._fail(grpc.StatusCode.UNKNOWN, f"not a gRPC response (content-type {shown!r})")
            )
            return
        self.fast = not self.ended
        if b"grpc-status" in fields:  # trailers-only response
            self._on_status(headers)

    def _on_status(self, headers: list[tuple[bytes, bytes]]) -> None:
        status, message = grpc_status(dict(headers))
        if status is not None:
            self._status = status
        if message:
            self._message = message

    def _on_stream_ended(self) -> None:
        if self.ended:
            return
        if self._status is None:
            self.end(self._fail(grpc.StatusCode.INTERNAL, "stream ended without grpc-status"))
        elif self.rbuf:
            self.end(self._fail(grpc.StatusCode.INTERNAL, "stream ended inside a message"))
        elif self._status == 0:
            self.end(None)
        else:
            code = CODES.get(self._status, grpc.StatusCode.UNKNOWN)
            self.end(self._fail(code, self._message))

    def end(self, error: LiftbridgeError | None) -> None:
        """End the stream; the first reason wins (e.g. trailers, then RST_STREAM)."""
        if not self.ended:
            self.ended = True
            self.fast = False
            self.error = error


def _goaway_reason(event: h2.events.ConnectionTerminated) -> str:
    """Why a GOAWAY the broker sent ended the stream, in words."""
    code = event.error_code
    if not code:  # NO_ERROR: the broker closing (stopping, restarting, draining)
        return "the broker closed the connection (GOAWAY NO_ERROR)"
    name = getattr(code, "name", None) or f"code {int(code)}"
    return f"the broker closed the connection with an error (GOAWAY {name})"
