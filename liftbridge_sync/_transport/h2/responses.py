"""The response side of the ``PublishAsync`` stream: frames in, responses and the end out.

:class:`ResponseReader` is the publish direction of the one h2 event dispatch
(:class:`~.dispatch.StreamDispatch`, shared with the Subscribe reader), and its codec:
the broker writes one response per DATA frame, and each is decoded in place by the publish
codec into an ``Ack`` or a ``Refusal`` (with the C speedups, runs of successful acks go
straight into ``Ack`` objects, and the WINDOW_UPDATE
increments among them are added to ``h2``'s send windows). A graceful GOAWAY (NO_ERROR,
still covering our stream) is kept from h2: the stream goes on draining until the broker
ends it. Used by the connection's I/O thread only (not thread-safe on its own).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import h2.connection

from liftbridge_sync._transport.h2.dispatch import MAX_WINDOW, Scanned, StreamDispatch
from liftbridge_sync._transport.h2.framing import (
    MAX_FRAME_SIZE,
    MAX_MESSAGE_SIZE,
    FrameError,
    split_messages,
)
from liftbridge_sync._wire.publish_codec import Answer, DecodeError, decode_response
from liftbridge_sync._wire.speedups import scan_acks
from liftbridge_sync._wire.status import CallContext, error_from_status
from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError

__all__ = ["MAX_WINDOW", "ResponseReader", "unavailable"]

#: Return fast-path DATA window in steps of this (far below the 4 MiB windows).
_CREDIT_AT = 64 * 1024


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
        self._stream_id = stream_id
        #: The receive limit; the C reader takes frames (so messages) of at most
        #: MAX_FRAME_SIZE bytes, so it runs only when the limit is not below that.
        self._max_message = max_message
        self.scan: Callable[[bytes | bytearray, int], Scanned] | None
        self.scan = self._scan if scan_acks is not None and max_message >= MAX_FRAME_SIZE else None
        self._parsed: list[Answer] = []
        self._dispatch = dispatch = StreamDispatch(
            conn,
            stream_id,
            self,
            max_message=max_message,
            credit_at=_CREDIT_AT,
            fail=_fail,
            lost=unavailable,
            keep_graceful=True,
        )
        self._inbuf = dispatch._inbuf
        #: WINDOW_UPDATE frames (and PING and SETTINGS ACKs) the connection must send
        #: (it clears this).
        self.credit_frames = dispatch.out
        #: Payload bytes of the DATA frames the last :meth:`receive` read itself (the
        #: responses' size on the wire, less 9 bytes of frame header each).
        self.data_bytes = 0

    @property
    def draining(self) -> bool:
        """The broker sent a graceful GOAWAY covering our stream."""
        return self._dispatch.draining

    @property
    def ended(self) -> bool:
        """The stream has ended (:attr:`error` says why; ``None`` for a clean end)."""
        return self._dispatch.ended

    @property
    def error(self) -> LiftbridgeError | None:
        """Why the stream ended (``None``: cleanly, or not ended)."""
        return self._dispatch.error

    def end(self, error: LiftbridgeError | None) -> None:
        """End the stream; the first reason wins."""
        self._dispatch.end(error)

    def receive(self, data: bytes) -> list[Answer]:
        """Take received bytes; returns the responses read, decoded by the publish codec
        (:mod:`~liftbridge_sync._wire.publish_codec`): :class:`~liftbridge_sync.models.Ack`
        objects (``partition`` -1, for the publisher to set) and ``Refusal`` objects.

        Raises:
            FrameError: framing the broker should never send.
        """
        self.data_bytes = self._dispatch.receive(data)
        parsed = self._parsed
        if parsed:
            self._parsed = []
        return parsed

    def _add_windows(self, connection: int, stream: int, frames: bytes) -> None:
        self._dispatch._add_windows(connection, stream, frames)

    # ------------------------------------------------------------------ the codec

    def _scan(self, buf: bytes | bytearray, pos: int) -> Scanned:
        """C: a run of plain successful acks (and the control frames among them)."""
        assert scan_acks is not None
        # Any buffer will do (C reads it with PyBUF_SIMPLE); typed as the bytearray.
        at, acks, taken, control, pongs, windows = scan_acks(
            buf,  # type: ignore[arg-type]
            pos,
            self._stream_id,
            MAX_FRAME_SIZE,
        )
        if acks:
            self._parsed += acks
        return at, taken, control, pongs, windows

    def bodies(self, bodies: list[bytes | bytearray]) -> None:
        """Decode whole response bodies, in order."""
        decode = decode_response
        try:
            for body in bodies:
                self._parsed.append(decode(bytes(body)))
        except DecodeError as exc:
            self._dispatch.end(_fail(grpc.StatusCode.INTERNAL, f"bad response: {exc}"))

    def messages(self, rbuf: bytearray) -> None:
        """Parse the whole length-prefixed responses at the start of ``rbuf``."""
        try:
            messages, pos = split_messages(rbuf, self._max_message)
        except FrameError as exc:
            code = (
                grpc.StatusCode.INTERNAL
                if exc.code == "INTERNAL"
                else grpc.StatusCode.RESOURCE_EXHAUSTED
            )
            self._dispatch.end(_fail(code, str(exc)))
            return
        if pos:
            del rbuf[:pos]
        self.bodies(messages)  # type: ignore[arg-type]


def _fail(code: grpc.StatusCode, details: str) -> LiftbridgeError:
    """The error of a status that ended the stream."""
    return error_from_status(code, details, CallContext.GENERIC)
