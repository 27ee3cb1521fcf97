"""The response side of the ``PublishAsync`` stream: frames in, responses and the end out.

:class:`ResponseReader` turns received bytes into decoded answers (``Ack`` or
``Refusal``, see :mod:`~liftbridge_sync._wire.publish_codec`): our stream's plain DATA
frames are cut out by :mod:`.framing` and decoded in place (the broker writes one response
per frame; with the C speedups, runs of successful acks are read straight from the frames
into ``Ack`` objects), WINDOW_UPDATE increments are added to ``h2``'s send windows here (with
the C speedups), and everything else goes to the ``h2`` state machine (headers and
trailers through HPACK, SETTINGS, PING, GOAWAY, RST_STREAM), and the first reason the
stream ended is kept. A graceful GOAWAY (NO_ERROR, still covering our stream) is kept
from h2 instead: the stream goes on draining until the broker ends it. Used by the
connection's I/O thread only (not thread-safe on its own).
"""

from __future__ import annotations

import grpc
import h2.connection
import h2.events
from h2.connection import ConnectionState
from h2.stream import StreamState

from liftbridge_sync._transport.h2.framing import (
    ACK,
    CODES,
    DATA,
    END_STREAM,
    GOAWAY,
    MAX_FRAME_SIZE,
    MAX_MESSAGE_SIZE,
    PADDED,
    PING,
    PREFIX,
    RESET_CODES,
    SETTINGS,
    FrameError,
    answer,
    grpc_status,
    http_status_code,
    split_frames,
    split_messages,
    window_update,
)
from liftbridge_sync._wire.publish_codec import Answer, DecodeError, decode_response
from liftbridge_sync._wire.speedups import scan_acks
from liftbridge_sync._wire.status import CallContext, error_from_status
from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError

__all__ = ["ResponseReader", "unavailable"]

#: Return fast-path DATA window in steps of this (far below the 4 MiB windows).
_CREDIT_AT = 64 * 1024
#: The largest flow-control window HTTP/2 allows.
MAX_WINDOW = 2**31 - 1
#: Stream states in which h2 takes a WINDOW_UPDATE by just adding to the window.
_UPDATABLE = (StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL, StreamState.HALF_CLOSED_REMOTE)


def unavailable(message: str) -> BrokerUnavailableError:
    """The error of a publish stream whose connection is gone."""
    return BrokerUnavailableError(f"publish stream: {message}", code="UNAVAILABLE")


class ResponseReader:
    """Reads stream ``stream_id``'s responses off connection ``conn`` (I/O thread only)."""

    def __init__(
        self,
        conn: h2.connection.H2Connection,
        stream_id: int,
        max_message: int = MAX_MESSAGE_SIZE,
    ) -> None:
        self._conn = conn
        self._stream_id = stream_id
        #: The receive limit; the C reader takes frames (so messages) of at most
        #: MAX_FRAME_SIZE bytes, so it runs only when the limit is not below that.
        self._max_message = max_message
        self._scan = scan_acks if max_message >= MAX_FRAME_SIZE else None
        self._inbuf = bytearray()  # received bytes not yet forming a whole frame
        self._rbuf = bytearray()  # response bytes not yet forming a whole message
        self._parsed: list[Answer] = []
        self._headers_seen = False  # a valid response HEADERS frame arrived
        self._credit = 0  # bytes of fast-path DATA not yet returned with WINDOW_UPDATE
        self._status: int | None = None
        self._message = ""
        #: WINDOW_UPDATE frames the connection must send (it clears this).
        self.credit_frames = bytearray()
        #: Payload bytes of the DATA frames the last :meth:`receive` read itself (the
        #: responses' size on the wire, less 9 bytes of frame header each).
        self.data_bytes = 0
        #: The broker sent a graceful GOAWAY covering our stream (see :meth:`_graceful`).
        self.draining = False
        #: The stream has ended (``error``: why; ``None`` for a clean end).
        self.ended = False
        self.error: LiftbridgeError | None = None

    def receive(self, data: bytes) -> list[Answer]:
        """Split ``data`` into frames: our stream's plain DATA frames are read here, the
        rest goes to h2 (whole frames only, so its buffer holds nothing between calls).

        h2 never sees the fast-path frames, so its own flow-control accounting stays
        consistent; their window is returned by our own WINDOW_UPDATE frames (collected in
        ``credit_frames`` for the connection to send). Returns the responses read,
        decoded: :class:`~liftbridge_sync.models.Ack` objects (``partition`` -1, for the
        publisher to set) and ``Refusal`` objects.

        Raises:
            FrameError: framing the broker should never send.
        """
        inbuf = self._inbuf
        inbuf += data
        rbuf = self._rbuf
        sid = self._stream_id
        fast = self._headers_seen and not self.ended
        slow = -1  # start of a run of frames for h2
        consumed = 0
        parsed = self._parsed
        start_at = 0
        scan = self._scan
        if fast and not rbuf and scan is not None:
            # C: the leading run of plain successful acks; Python does what follows.
            start_at, acks, consumed, control, pongs, windows = scan(inbuf, 0, sid, MAX_FRAME_SIZE)
            if acks:
                parsed += acks
            if pongs:  # PING ACKs answering the broker's PINGs, sent with the credit
                self.credit_frames += pongs
            if control:  # the connection's SETTINGS (and odd WINDOW_UPDATEs) on the way
                self._handle(self._conn.receive_data(control))
                fast = self._headers_seen and not self.ended
            if windows is not None and not self.ended:
                self._add_windows(*windows)
                fast = self._headers_seen and not self.ended
        frames, consumed_to = split_frames(inbuf, MAX_FRAME_SIZE, start_at)
        decode = decode_response
        unpack = PREFIX.unpack_from
        try:
            for kind, flags, stream, start, end in frames:
                if kind == GOAWAY and self._graceful(inbuf, start, end):
                    if slow >= 0:  # what came before it goes to h2 first
                        self._handle(self._conn.receive_data(bytes(inbuf[slow : start - 9])))
                        slow = -1
                        fast = self._headers_seen and not self.ended
                    continue
                # Flags END_STREAM and PADDED need h2.
                if kind == DATA and not flags & (END_STREAM | PADDED) and stream == sid:
                    if slow >= 0:
                        self._handle(self._conn.receive_data(bytes(inbuf[slow : start - 9])))
                        slow = -1
                        fast = self._headers_seen and not self.ended
                    if fast:
                        consumed += end - start
                        # The broker writes one response per frame: parse it in place.
                        if (
                            not rbuf
                            and 5 <= end - start <= self._max_message + 5
                            and unpack(inbuf, start)
                            == (
                                0,
                                end - start - 5,
                            )
                        ):
                            parsed.append(decode(bytes(inbuf[start + 5 : end])))
                        else:
                            rbuf += inbuf[start:end]
                            if len(rbuf) >= 5:
                                self._decode()
                        continue
                elif (
                    fast
                    and stream == 0
                    and not flags & ACK
                    and (kind == PING or (kind == SETTINGS and start == end))
                ):
                    # Answered here, as the C reader does: no state for h2 to keep, and
                    # h2 takes ~10 us per frame (a broker's flood must not stall us).
                    if slow >= 0:
                        self._handle(self._conn.receive_data(bytes(inbuf[slow : start - 9])))
                        slow = -1
                        fast = self._headers_seen and not self.ended
                    self.credit_frames += answer(inbuf, start - 9, end)
                    continue
                if slow < 0:
                    slow = start - 9
        except DecodeError as exc:
            self.end(error_from_status(grpc.StatusCode.INTERNAL, f"bad response: {exc}"))
        if slow >= 0 and not self.ended:
            self._handle(self._conn.receive_data(bytes(inbuf[slow:consumed_to])))
        if consumed_to:
            del inbuf[:consumed_to]
        self.data_bytes = consumed
        if consumed:
            self._credit += consumed
            if self._credit >= _CREDIT_AT and not self.ended:
                # Connection and stream windows, both (frames h2 did not see).
                self.credit_frames += window_update(0, self._credit) + window_update(
                    sid, self._credit
                )
                self._credit = 0
        if parsed:
            self._parsed = []
        return parsed

    def _graceful(self, inbuf: bytearray, start: int, end: int) -> bool:
        """Whether a GOAWAY frame is a graceful shutdown that still covers our stream
        (NO_ERROR, last stream id at or above ours): then the broker answers what it was
        sent and ends the stream itself, so the frame is kept from h2 (which would
        refuse every later frame of the connection) and only :attr:`draining` is set.
        Any other GOAWAY goes to h2 and ends the stream."""
        if end - start < 8:
            return False  # h2 raises the framing error
        last_stream = int.from_bytes(inbuf[start : start + 4], "big") & 0x7FFFFFFF
        code = int.from_bytes(inbuf[start + 4 : start + 8], "big")
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
        self._handle(conn.receive_data(frames))

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
                self.end(self._final_error())
            elif kind is h2.events.StreamReset:
                assert isinstance(event, h2.events.StreamReset)
                code = RESET_CODES.get(int(event.error_code or 0), grpc.StatusCode.INTERNAL)
                self.end(error_from_status(code, f"stream reset ({event.error_code!r})"))
            elif kind is h2.events.ConnectionTerminated:
                assert isinstance(event, h2.events.ConnectionTerminated)
                self.end(unavailable(f"the broker sent GOAWAY ({event.error_code!r})"))
            # SETTINGS and PING are acknowledged by h2 itself (flushed by the loop);
            # WindowUpdated needs nothing: the loop pumps pending data after each read.
        if consumed and not self.ended:
            # One WINDOW_UPDATE decision per recv() instead of one per frame.
            self._conn.acknowledge_received_data(consumed, self._stream_id)
        if len(rbuf) >= 5:
            self._decode()

    def _decode(self) -> None:
        rbuf = self._rbuf
        try:
            messages, pos = split_messages(rbuf, self._max_message)
        except FrameError as exc:
            code = (
                grpc.StatusCode.INTERNAL
                if exc.code == "INTERNAL"
                else grpc.StatusCode.RESOURCE_EXHAUSTED
            )
            self.end(error_from_status(code, str(exc)))
            return
        if pos:
            del rbuf[:pos]
        decode = decode_response
        try:
            self._parsed += [decode(message) for message in messages]
        except DecodeError as exc:
            self.end(error_from_status(grpc.StatusCode.INTERNAL, f"bad response: {exc}"))

    def _on_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        fields = dict(headers)
        status = fields.get(b":status", b"")
        code = http_status_code(status)
        if code is not None:
            self.end(error_from_status(code, f"HTTP status {status.decode(errors='replace')}"))
            return
        content_type = fields.get(b"content-type", b"")
        if not content_type.startswith(b"application/grpc"):
            self.end(
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

    def end(self, error: LiftbridgeError | None) -> None:
        # The first reason wins (e.g. trailers followed by the broker's RST_STREAM).
        if not self.ended:
            self.ended = True
            self.error = error
