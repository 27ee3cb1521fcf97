"""Reassembly of response sequences per stream identifier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.sbp._errors import ResponseSequenceError, ResponseTooLargeError, SBPSystemError
from liftbridge_sync.sbp._frame import Frame, Opcode

#: Default bound of the frames a :class:`ResponseAssembler` holds (64 MiB).
DEFAULT_MAX_PENDING_BYTES: Final = 64 * 1024 * 1024
#: Default bound of the unfinished sequences a :class:`ResponseAssembler` tracks.
DEFAULT_MAX_PENDING_SEQUENCES: Final = 65_536
#: Octets charged per held frame on top of its length: the Python objects holding it
#: (about 120 on CPython 3.11, whatever the frame's size).
FRAME_OVERHEAD: Final = 128
#: Octets charged per unfinished sequence whose frames are held (about 170 on CPython).
SEQUENCE_OVERHEAD: Final = 192


@dataclass(frozen=True, slots=True)
class Response:
    """A whole response sequence: the response frames of one stream identifier.

    Attributes:
        stream_id: The stream identifier of the request answered.
        opcode: The opcode of the request answered.
        frames: The frames in arrival order; the last has the response-end flag.

    Immutable; safe to share between threads.
    """

    stream_id: int
    opcode: Opcode
    frames: tuple[Frame, ...]

    @property
    def headers(self) -> tuple[bytes, ...]:
        """The extended header of each frame."""
        return tuple(frame.header for frame in self.frames)

    @property
    def payload(self) -> bytes:
        """The payloads of the frames, concatenated."""
        return b"".join(frame.payload for frame in self.frames)


@dataclass(slots=True)
class _Pending:
    opcode: Opcode
    frames: list[Frame] = field(default_factory=list)
    size: int = 0


class ResponseAssembler:
    """Joins response frames into whole responses, per stream identifier.

    Feed it the response frames a :class:`FrameDecoder` returns; requests (and discard
    reports) are the caller's to handle. Frames held for unfinished sequences count
    against ``max_pending_bytes`` with what they cost in memory: their frame length plus
    :data:`FRAME_OVERHEAD` each, plus :data:`SEQUENCE_OVERHEAD` per sequence; a frame that
    ends its sequence at once is not held. At most ``max_pending_sequences`` stream
    identifiers are tracked at a time, held or being dropped.

    Args:
        max_pending_bytes: Bound of the memory charged for all unfinished sequences.
        max_pending_sequences: Bound of the unfinished sequences tracked.

    Raises:
        ArgumentTypeError: A bound is not an int.
        ConfigurationError: A bound is not positive.

    Not thread-safe: use one assembler per connection, from one thread at a time.
    """

    def __init__(
        self,
        *,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        max_pending_sequences: int = DEFAULT_MAX_PENDING_SEQUENCES,
    ) -> None:
        for name, value in (
            ("max_pending_bytes", max_pending_bytes),
            ("max_pending_sequences", max_pending_sequences),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArgumentTypeError(f"{name} must be an int")
            if value < 1:
                raise ConfigurationError(f"{name} must be positive, got {value}")
        self._limit = max_pending_bytes
        self._max_sequences = max_pending_sequences
        self._pending: dict[int, _Pending] = {}
        self._dropping: set[int] = set()
        self._size = 0

    @property
    def pending_bytes(self) -> int:
        """Memory charged for the frames held: their lengths plus the overheads."""
        return self._size

    @property
    def pending_stream_ids(self) -> frozenset[int]:
        """Stream identifiers with an unfinished sequence (held or being dropped)."""
        return frozenset(self._pending) | frozenset(self._dropping)

    def add(self, frame: Frame) -> Response | None:
        """Add a response frame.

        The assembler's state is updated before anything is raised, so it stays usable.

        Args:
            frame: A response frame.

        Returns:
            The whole response when ``frame`` ends its sequence, else ``None``.

        Raises:
            SBPSystemError: ``frame`` has the system-error flag; its sequence is over.
            ResponseTooLargeError: Holding ``frame`` would exceed ``max_pending_bytes`` (the
                sequence is dropped), or it opens a sequence beyond
                ``max_pending_sequences`` (the frame is refused and its stream identifier
                not tracked: later frames of it are taken as a new sequence).
            ResponseSequenceError: ``frame`` is a request frame, or its opcode differs from
                the one of its sequence; the frame is rejected and the sequence goes on.
            ArgumentTypeError: ``frame`` is no :class:`Frame` (e.g. a
                :class:`DiscardedFrame`); nothing changes.
        """
        if not isinstance(frame, Frame):
            raise ArgumentTypeError(
                f"frame must be a Frame, not {type(frame).__name__} (discard reports and "
                "request frames are the caller's to handle)"
            )
        sid = frame.stream_id
        if not frame.is_response:
            raise ResponseSequenceError(
                f"stream {sid}: a request frame ({frame.opcode.name}) is not a response",
                stream_id=sid,
            )
        if frame.is_system_error:
            partial = self._pop(sid)
            self._dropping.discard(sid)
            raise SBPSystemError(
                f"stream {sid}: system error in response to {frame.opcode.name}",
                stream_id=sid,
                frame=frame,
                partial=partial,
            )
        pending = self._pending.get(sid)
        if pending is not None and pending.opcode is not frame.opcode:
            raise ResponseSequenceError(
                f"stream {sid}: {frame.opcode.name} frame inside a {pending.opcode.name} response",
                stream_id=sid,
            )
        if sid in self._dropping:
            if frame.is_response_end:
                self._dropping.discard(sid)
            return None
        if frame.is_response_end:
            return Response(sid, frame.opcode, (*self._pop(sid), frame))
        cost = frame.length + FRAME_OVERHEAD
        if pending is None:
            # Dropped sequences count too: each is a stream identifier remembered.
            if len(self._pending) + len(self._dropping) >= self._max_sequences:
                raise ResponseTooLargeError(
                    f"stream {sid}: {self._max_sequences} unfinished sequences are tracked "
                    "already (max_pending_sequences); the frame is refused",
                    stream_id=sid,
                )
            cost += SEQUENCE_OVERHEAD
        if self._size + cost > self._limit:
            self._pop(sid)
            self._dropping.add(sid)
            raise ResponseTooLargeError(
                f"stream {sid}: holding a {frame.length}-octet frame would exceed "
                f"max_pending_bytes {self._limit}; the response is dropped",
                stream_id=sid,
            )
        if pending is None:
            pending = self._pending[sid] = _Pending(frame.opcode)
        pending.frames.append(frame)
        pending.size += cost
        self._size += cost
        return None

    def discard(self, stream_id: int) -> tuple[Frame, ...]:
        """Forget the unfinished sequence of ``stream_id`` (e.g. its request timed out).

        Returns:
            The frames that were held for it.

        Raises:
            ArgumentTypeError: ``stream_id`` is not an int (``True`` would be stream 1).
        """
        if isinstance(stream_id, bool) or not isinstance(stream_id, int):
            raise ArgumentTypeError(f"stream_id must be an int, got {type(stream_id).__name__}")
        self._dropping.discard(stream_id)
        return self._pop(stream_id)

    def _pop(self, stream_id: int) -> tuple[Frame, ...]:
        pending = self._pending.pop(stream_id, None)
        if pending is None:
            return ()
        self._size -= pending.size
        return tuple(pending.frames)
