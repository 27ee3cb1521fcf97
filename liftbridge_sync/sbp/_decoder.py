"""The incremental :class:`FrameDecoder` and :func:`decode_frame`."""

from __future__ import annotations

from liftbridge_sync.errors import ArgumentTypeError
from liftbridge_sync.sbp._errors import (
    FrameTooLargeError,
    FramingError,
    MalformedFrameError,
    TruncatedFrameError,
)
from liftbridge_sync.sbp._frame import (
    _KNOWN_OPCODES,
    _LENGTH,
    _PREFIX,
    DEFAULT_MAX_FRAME_SIZE,
    MAGIC,
    MAX_HEADER_LENGTH,
    MIN_FRAME_SIZE,
    DiscardedFrame,
    DiscardReason,
    Flags,
    Frame,
    Opcode,
    _BytesLike,
    _check_max_frame_size,
)


def decode_frame(
    data: _BytesLike, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> Frame | DiscardedFrame:
    """Decode exactly one frame.

    Args:
        data: The octets of one frame, nothing more or less.
        max_frame_size: Refuse frames longer than this (16..``2**31 - 1``).

    Returns:
        The frame, or the report of its discarding.

    Raises:
        FramingError: ``data`` is not exactly one frame (a subclass says why).
        ArgumentTypeError: ``data`` is not bytes-like, or ``max_frame_size`` not an int.
        ConfigurationError: ``max_frame_size`` is out of range.

    Thread-safe: a pure function.
    """
    decoder = FrameDecoder(max_frame_size=max_frame_size)
    events = decoder.feed(data)
    decoder.close()
    if len(events) != 1:
        raise MalformedFrameError(f"expected one frame, found {len(events)}", offset=0)
    return events[0]


class FrameDecoder:
    """Incremental decoder: feed it chunks of a byte stream, get whole frames back.

    At most one partial frame is held between calls, and a frame is refused as soon as
    its length field is read if it exceeds ``max_frame_size``, so the buffer never holds
    more than the chunk being fed plus one frame. After a :class:`FramingError` the
    stream cannot be framed any more and every later call raises :class:`FramingError`.

    Args:
        max_frame_size: The largest frame accepted (16..``2**31 - 1``).

    Raises:
        ArgumentTypeError: ``max_frame_size`` is not an int.
        ConfigurationError: ``max_frame_size`` is out of range.

    Not thread-safe: use one decoder per byte stream, from one thread at a time.
    """

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._limit = _check_max_frame_size(max_frame_size)
        self._buf = bytearray()
        self._offset = 0  # stream offset of self._buf[0]
        self._failure: FramingError | None = None
        self._closed = False

    @property
    def max_frame_size(self) -> int:
        """The largest frame accepted."""
        return self._limit

    @property
    def buffered(self) -> int:
        """Octets received but not yet part of a returned frame."""
        return len(self._buf)

    @property
    def offset(self) -> int:
        """Stream offset of the next octet to decode (octets consumed so far)."""
        return self._offset

    def feed(self, data: _BytesLike) -> list[Frame | DiscardedFrame]:
        """Add octets and return the frames (and discard reports) they complete, in order.

        Args:
            data: The next chunk of the stream, of any size (empty is fine).

        Returns:
            Decoded frames and :class:`DiscardedFrame` reports, in stream order.

        Raises:
            FrameTooLargeError: A frame length exceeds ``max_frame_size``.
            MalformedFrameError: A frame length is below 16, or an extended header runs
                past the end of its frame.
            FramingError: The decoder failed earlier, or was closed.
            ArgumentTypeError: ``data`` is not bytes-like, or a released memoryview.
        """
        self._check_usable()
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ArgumentTypeError(f"data must be bytes-like, not {type(data).__name__}")
        if isinstance(data, memoryview):
            # A bytearray takes only a contiguous view (a strided one raises TypeError).
            try:
                contiguous = data.c_contiguous
            except ValueError:
                raise ArgumentTypeError("data is a released memoryview") from None
            if not contiguous:
                data = data.tobytes()
        self._buf += data
        events: list[Frame | DiscardedFrame] = []
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(buf, pos)
                self._check_length(length, pos)
                if len(buf) - pos < length:
                    break
                events.append(self._decode(buf, pos, length))
                pos += length
        except FramingError as exc:
            exc.events = tuple(events)
            self._failure = exc
            raise
        finally:
            del buf[:pos]
            self._offset += pos
        return events

    def close(self) -> None:
        """Declare the end of the stream.

        Raises:
            TruncatedFrameError: The stream ended inside a frame.
            FramingError: The decoder failed earlier.
        """
        if self._closed:
            return
        self._check_usable()
        self._closed = True
        if self._buf:
            raise TruncatedFrameError(
                f"stream ended inside a frame: {len(self._buf)} octets after offset "
                f"{self._offset} do not make a whole frame",
                offset=self._offset,
            )

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise FramingError(
                f"the decoder failed earlier: {self._failure}", offset=self._failure.offset
            ) from self._failure
        if self._closed:
            raise FramingError("the decoder is closed")

    def _check_length(self, length: int, pos: int) -> None:
        offset = self._offset + pos
        if length < MIN_FRAME_SIZE:
            raise MalformedFrameError(
                f"frame length {length} at offset {offset} is below the minimum {MIN_FRAME_SIZE}",
                offset=offset,
            )
        if length > self._limit:
            raise FrameTooLargeError(
                f"frame length {length} at offset {offset} exceeds the maximum frame size "
                f"{self._limit}",
                offset=offset,
                length=length,
                limit=self._limit,
            )

    def _decode(self, buf: bytearray, pos: int, length: int) -> Frame | DiscardedFrame:
        _, magic, opcode, flags, stream_id, fmt_len = _PREFIX.unpack_from(buf, pos)
        offset = self._offset + pos
        reason = None
        if magic != MAGIC:
            reason = DiscardReason.BAD_MAGIC
        elif opcode not in _KNOWN_OPCODES:
            reason = DiscardReason.UNKNOWN_OPCODE
        if reason is not None:
            return DiscardedFrame(reason, offset, length, magic, opcode, flags, stream_id)
        header_length = fmt_len & MAX_HEADER_LENGTH
        if header_length > length - MIN_FRAME_SIZE:
            raise MalformedFrameError(
                f"extended header of {header_length} octets overruns the frame of {length} "
                f"octets at offset {offset}",
                offset=offset,
            )
        start = pos + MIN_FRAME_SIZE
        with memoryview(buf) as view:
            header = bytes(view[start : start + header_length])
            payload = bytes(view[start + header_length : pos + length])
        return Frame(Opcode(opcode), stream_id, Flags(flags), header, payload, fmt_len >> 24)
