"""SBP exceptions (the tree is drawn in the package docstring)."""

from __future__ import annotations

from typing import Any

from liftbridge_sync.errors import LiftbridgeError

# Frames are typed ``object`` here: the frame module raises these errors, so naming its
# classes would make the two modules import each other (tests/unit/test_architecture.py).


class SBPError(LiftbridgeError):
    """Root of the errors of the SBP frame layer.

    Instances are immutable values and safe to share between threads.
    """


class InvalidFrameError(SBPError, ValueError):
    """A :class:`Frame` field is out of range, or the frame may not be sent as it is.

    Instances are immutable values and safe to share between threads.
    """


class FramingError(SBPError):
    """The byte stream cannot be split into frames; the decoder that raised it is unusable.

    Attributes:
        offset: Stream offset of the first octet of the offending frame, or ``None``.
        events: What the same :meth:`FrameDecoder.feed` call decoded before the error, in
            order (those frames were not returned, since the call raised).

    Instances are immutable values and safe to share between threads.
    """

    def __init__(
        self,
        message: str = "",
        *,
        offset: int | None = None,
        events: tuple[object, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.offset = offset
        self.events = events


class FrameTooLargeError(FramingError):
    """A frame is longer than the maximum frame size (decoding or encoding).

    Attributes:
        length: The frame length.
        limit: The maximum frame size in force.

    Instances are immutable values and safe to share between threads.
    """

    def __init__(
        self, message: str = "", *, length: int = 0, limit: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.length = length
        self.limit = limit


class MalformedFrameError(FramingError):
    """A frame length is below 16, or an extended header runs past the end of its frame.

    Instances are immutable values and safe to share between threads.
    """


class TruncatedFrameError(FramingError):
    """The byte stream ended inside a frame.

    Instances are immutable values and safe to share between threads.
    """


class ResponseSequenceError(SBPError):
    """A response frame does not fit the response sequence of its stream identifier.

    Attributes:
        stream_id: The stream identifier concerned, or ``None``.

    Instances are immutable values and safe to share between threads.
    """

    def __init__(self, message: str = "", *, stream_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.stream_id = stream_id


class ResponseTooLargeError(ResponseSequenceError):
    """Holding one more frame would exceed the assembler's ``max_pending_bytes``, or
    ``max_pending_sequences`` sequences are unfinished already.

    Over ``max_pending_bytes``, the sequence of ``stream_id`` is dropped, and so are its
    frames still to come, up to and including the one that ends it. Over
    ``max_pending_sequences``, only the frame is refused (nothing more can be tracked).

    Instances are immutable values and safe to share between threads.
    """


class SBPSystemError(SBPError):
    """The peer answered a request with a system-error frame.

    Attributes:
        stream_id: The stream identifier of the failed request.
        frame: The error frame; its extended header is a FlatBuffers
            ``SystemErrorResponse`` (status code, message, detail), left undecoded.
        partial: The response frames of the same sequence received before it.

    Instances are immutable values and safe to share between threads.
    """

    def __init__(
        self,
        message: str = "",
        *,
        stream_id: int = 0,
        frame: object | None = None,
        partial: tuple[object, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.stream_id = stream_id
        self.frame = frame
        self.partial = partial
