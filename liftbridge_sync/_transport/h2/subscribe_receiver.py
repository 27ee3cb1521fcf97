"""The receive side of a ``Subscribe`` call over HTTP/2: bytes in, wire messages out.

:class:`SubscribeReceiver` is what :class:`~liftbridge_sync._transport.h2_subscribe.\
H2SubscribeCall` does with the bytes one ``recv()`` returned, without any I/O: the one h2
event dispatch (:class:`~.dispatch.StreamDispatch`, shared with the publish stream)
splits them into frames, takes the broker's plain single-message DATA frames of our
stream out of the byte stream before ``h2`` sees them, hands everything else to ``h2``
and returns the window of what ``h2`` did not see; this module is the Subscribe codec
(every whole ``Message`` decoded in bulk onto a ready list) and turns the stream's end
into the call's: a :class:`~liftbridge_sync.errors.LiftbridgeError` mapped by
:mod:`liftbridge_sync._wire.status` (as opening the subscription if no message arrived
before it, else as ending a running one). Not thread-safe: only the thread iterating
the call runs it.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import h2.connection
from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2 import framing
from liftbridge_sync._transport.h2.dispatch import Scanned, StreamDispatch
from liftbridge_sync._wire.status import CallContext, error_from_status
from liftbridge_sync.errors import LiftbridgeError

__all__ = ["SubscribeReceiver"]

_SC = grpc.StatusCode
_PREFIX = framing.PREFIX
#: Return the window of the DATA frames we read ourselves in steps of this.
_CREDIT_AT = 256 * 1024


class SubscribeReceiver:
    """Decoding state of one Subscribe stream (the receiving half of the call).

    Not thread-safe: only the iterating thread feeds it.
    """

    #: No C scanner: the dispatch's own loop takes runs of messages.
    scan: Callable[[bytes | bytearray, int], Scanned] | None = None

    def __init__(self, max_message: int) -> None:
        self._max_message = max_message
        self._conn: h2.connection.H2Connection | None = None
        self._stream_id = 1
        self._dispatch: StreamDispatch | None = None  # once connected
        #: Decoded messages not handed out yet, and the index of the next one.
        self._ready: list[api_pb2.Message] = []
        self._next = 0
        self._outbuf = bytearray()  # frames to write after this read
        #: Set once the stream is over: None for OK, else the error (raised after
        #: every message received before it was handed out).
        self._ended = False
        self._error: LiftbridgeError | None = None
        #: A message was handed out (the server's handshake): a later end is a running
        #: subscription's, not a refused open.
        self._received = False

    def _attach(self, conn: h2.connection.H2Connection, stream_id: int) -> None:
        """Start reading stream ``stream_id`` of the connection just dialled."""
        self._conn = conn
        self._stream_id = stream_id
        dispatch = StreamDispatch(
            conn,
            stream_id,
            self,
            max_message=self._max_message,
            credit_at=_CREDIT_AT,
            fail=self._error_of,
            lost=self._unavailable,
            keep_graceful=False,  # the subscription resubscribes at once, wherever led
        )
        dispatch.out = self._outbuf
        self._dispatch = dispatch

    def _receive(self, data: bytes) -> None:
        """Take what one ``recv()`` returned; queue what is to be written.

        Raises:
            FrameError: framing the broker should never send.
            h2.exceptions.ProtocolError: what h2 refuses.
        """
        dispatch = self._dispatch
        conn = self._conn
        assert dispatch is not None and conn is not None
        dispatch.receive(data)
        if dispatch.ended and not self._ended:
            self._ended = True
            self._error = dispatch.error
        self._outbuf += conn.data_to_send()

    # ------------------------------------------------------------------ the codec

    def bodies(self, bodies: list[bytes | bytearray]) -> None:
        """Decode message bodies in order onto the ready list."""
        parse = api_pb2.Message.FromString
        try:
            self._ready += [parse(body) for body in bodies]  # type: ignore[arg-type]
        except DecodeError:
            ready = self._ready
            for body in bodies:
                try:
                    ready.append(parse(body))  # type: ignore[arg-type]
                except DecodeError as exc:
                    self._stop(_SC.INTERNAL, f"bad message: {exc}")
                    break

    def messages(self, rbuf: bytearray) -> None:
        """Decode every whole message at the start of the DATA buffer."""
        size = len(rbuf)
        pos = 0
        ready = self._ready
        parse = api_pb2.Message.FromString
        dispatch = self._dispatch
        assert dispatch is not None
        while size - pos >= 5 and not dispatch.ended:
            flag, length = _PREFIX.unpack_from(rbuf, pos)
            if flag:
                self._stop(_SC.INTERNAL, "compressed message not asked for")
                break
            if length > self._max_message:
                # INTERNAL, not grpcio's RESOURCE_EXHAUSTED: a subscription reads that
                # as the end of a read-only partition and would stop without a word.
                self._stop(
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
                self._stop(_SC.INTERNAL, f"bad message: {exc}")
                break
            pos = end
        if pos:
            del rbuf[:pos]

    def _stop(self, code: grpc.StatusCode, details: str) -> None:
        """End the stream from the codec (the dispatch keeps the first reason)."""
        dispatch = self._dispatch
        assert dispatch is not None
        dispatch.end(self._error_of(code, details))

    # ------------------------------------------------------------------ the end

    def _error_of(self, code: grpc.StatusCode, details: str) -> LiftbridgeError:
        """The error of status ``code``: a refused open before any message, else the
        end of a running subscription."""
        # Every message decoded before the end is handed out before the error is raised.
        opened = self._received or self._next < len(self._ready)
        context = CallContext.SUBSCRIPTION if opened else CallContext.SUBSCRIBE_OPEN
        return error_from_status(code, details, context)

    def _unavailable(self, details: str) -> LiftbridgeError:
        return self._error_of(_SC.UNAVAILABLE, details)

    def _end(self, code: grpc.StatusCode, details: str) -> None:
        # The first reason wins (e.g. trailers followed by the broker's RST_STREAM).
        if not self._ended:
            self._fail(code, details)

    def _fail(self, code: grpc.StatusCode, details: str) -> LiftbridgeError:
        """End the call with the error of status ``code``, whatever ended it before."""
        self._ended = True
        self._error = error = self._error_of(code, details)
        if self._dispatch is not None:
            self._dispatch.end(error)
        return error
