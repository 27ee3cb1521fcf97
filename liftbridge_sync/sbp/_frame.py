"""Frame fields, the :class:`Frame` value and :func:`encode_frame`."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final, TypeAlias

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.sbp._errors import FrameTooLargeError, InvalidFrameError

#: The magic code every valid frame carries.
MAGIC: Final = 23
#: Size of the fixed header (length, magic, opcode, flags, stream identifier).
FIXED_HEADER_SIZE: Final = 12
#: Size of a frame with an empty extended header and an empty payload.
MIN_FRAME_SIZE: Final = 16
#: Largest extended header the 24-bit length field can describe.
MAX_HEADER_LENGTH: Final = 0xFFFFFF
#: Default maximum frame size for encoding and decoding (16 MiB).
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
#: Largest ``max_frame_size`` accepted (a signed 32-bit frame length).
MAX_FRAME_SIZE_LIMIT: Final = 2**31 - 1

_PREFIX = struct.Struct(">IBHBiI")  # length, magic, opcode, flags, stream id, format|hlen
_LENGTH = struct.Struct(">I")
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_BytesLike: TypeAlias = bytes | bytearray | memoryview


class Opcode(enum.IntEnum):
    """Operation codes, from the spec's table of frame types.

    ``CRATE_RANGE`` (the table's spelling) is an alias of ``CREATE_RANGE``.
    Immutable; safe to share between threads.
    """

    PING = 0x0001
    GOAWAY = 0x0002
    HEARTBEAT = 0x0003
    ALLOCATE_ID = 0x0004
    APPEND = 0x1001
    FETCH = 0x1002
    LIST_RANGES = 0x2001
    SEAL_RANGE = 0x2002
    SYNC_RANGES = 0x2003
    CREATE_RANGE = 0x2004
    CRATE_RANGE = 0x2004
    DESCRIBE_RANGE = 0x2005
    CREATE_STREAMS = 0x3001
    DELETE_STREAMS = 0x3002
    UPDATE_STREAMS = 0x3003
    DESCRIBE_STREAMS = 0x3004
    TRIM_STREAMS = 0x3005
    REPORT_METRICS = 0x4001
    DESCRIBE_PD_CLUSTER = 0x4002


class Flags(enum.IntFlag):
    """Frame flags. Other bits are unused; they are kept as received and ignored.

    Immutable; safe to share between threads.
    """

    RESPONSE = 0x01
    RESPONSE_END = 0x02
    SYSTEM_ERROR = 0x04


class HeaderFormat(enum.IntEnum):
    """Extended header formats defined by the spec.

    Immutable; safe to share between threads.
    """

    FLATBUFFERS = 0x01


_KNOWN_OPCODES: Final = frozenset(int(opcode) for opcode in Opcode)


class DiscardReason(enum.Enum):
    """Why the decoder discarded a frame.

    Immutable; safe to share between threads.
    """

    BAD_MAGIC = "bad magic"
    UNKNOWN_OPCODE = "unknown opcode"


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidFrameError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidFrameError(f"{name} must be in {low}..{high}, got {value}")
    return value


def _check_bytes(name: str, value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidFrameError(f"{name} must be bytes-like, not {type(value).__name__}")
    try:
        return bytes(value)
    except ValueError:  # the only one bytes() raises for a view: it was released
        raise InvalidFrameError(f"{name} is a released memoryview") from None


@dataclass(frozen=True, slots=True)
class Frame:
    """One SBP frame with a known opcode and the right magic.

    Attributes:
        opcode: The operation code (an int of the table is turned into an :class:`Opcode`).
        stream_id: The stream identifier, a signed 32-bit integer.
        flags: The flags octet, unused bits included.
        header: The extended header, opaque (at most ``MAX_HEADER_LENGTH`` octets).
        payload: The payload, opaque.
        header_format: The extended header format octet (:class:`HeaderFormat`).

    Raises:
        InvalidFrameError: A field has the wrong type or is out of range.

    Immutable (bytes-like arguments are copied to ``bytes``); safe to share between threads.
    """

    opcode: Opcode
    stream_id: int
    flags: Flags = Flags(0)
    header: bytes = b""
    payload: bytes = b""
    header_format: int = HeaderFormat.FLATBUFFERS

    def __post_init__(self) -> None:
        opcode = _check_int("opcode", self.opcode, 0, 0xFFFF)
        if opcode not in _KNOWN_OPCODES:
            raise InvalidFrameError(f"unknown opcode {opcode:#06x}")
        object.__setattr__(self, "opcode", Opcode(opcode))
        _check_int("stream_id", self.stream_id, _INT32_MIN, _INT32_MAX)
        object.__setattr__(self, "flags", Flags(_check_int("flags", self.flags, 0, 0xFF)))
        header = _check_bytes("header", self.header)
        if len(header) > MAX_HEADER_LENGTH:
            raise InvalidFrameError(
                f"extended header is {len(header)} octets, at most {MAX_HEADER_LENGTH} fit"
            )
        object.__setattr__(self, "header", header)
        object.__setattr__(self, "payload", _check_bytes("payload", self.payload))
        fmt = _check_int("header_format", self.header_format, 0, 0xFF)
        object.__setattr__(self, "header_format", int(fmt))

    @property
    def length(self) -> int:
        """The frame length field: the size of the whole encoded frame."""
        return MIN_FRAME_SIZE + len(self.header) + len(self.payload)

    @property
    def is_response(self) -> bool:
        """Whether the response flag is set (otherwise this is a request frame)."""
        return bool(self.flags & Flags.RESPONSE)

    @property
    def is_response_end(self) -> bool:
        """Whether this is a response frame that ends its response sequence."""
        return self.is_response and bool(self.flags & Flags.RESPONSE_END)

    @property
    def is_system_error(self) -> bool:
        """Whether this is a response frame with the system-error flag."""
        return self.is_response and bool(self.flags & Flags.SYSTEM_ERROR)


@dataclass(frozen=True, slots=True)
class DiscardedFrame:
    """A report that the decoder discarded a frame, as the spec requires.

    Attributes:
        reason: Wrong magic, or an opcode not in the table.
        offset: Stream offset of the frame's first octet.
        length: The frame length field (that many octets were skipped).
        magic: The magic code octet received.
        opcode: The operation code received.
        flags: The flags octet received.
        stream_id: The stream identifier received.

    Immutable; safe to share between threads.
    """

    reason: DiscardReason
    offset: int
    length: int
    magic: int
    opcode: int
    flags: int
    stream_id: int


def _check_max_frame_size(max_frame_size: int) -> int:
    if isinstance(max_frame_size, bool) or not isinstance(max_frame_size, int):
        raise ArgumentTypeError(
            f"max_frame_size must be an int, not {type(max_frame_size).__name__}"
        )
    if not MIN_FRAME_SIZE <= max_frame_size <= MAX_FRAME_SIZE_LIMIT:
        raise ConfigurationError(
            f"max_frame_size must be in {MIN_FRAME_SIZE}..{MAX_FRAME_SIZE_LIMIT}, "
            f"got {max_frame_size}"
        )
    return max_frame_size


def encode_frame(frame: Frame, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Encode a frame.

    Args:
        frame: The frame.
        max_frame_size: Refuse frames longer than this (16..``2**31 - 1``).

    Returns:
        ``frame.length`` octets.

    Raises:
        InvalidFrameError: A request frame has a negative stream identifier.
        FrameTooLargeError: The frame is longer than ``max_frame_size``.
        ArgumentTypeError: ``frame`` is no :class:`Frame` (e.g. a :class:`DiscardedFrame`),
            or ``max_frame_size`` is not an int.
        ConfigurationError: ``max_frame_size`` is out of range.

    Thread-safe: a pure function.
    """
    if not isinstance(frame, Frame):
        raise ArgumentTypeError(f"frame must be a Frame, not {type(frame).__name__}")
    limit = _check_max_frame_size(max_frame_size)
    if frame.stream_id < 0 and not frame.is_response:
        raise InvalidFrameError(
            f"a request frame needs a non-negative stream identifier, got {frame.stream_id}"
        )
    length = frame.length
    if length > limit:
        raise FrameTooLargeError(
            f"frame of {length} octets exceeds the maximum frame size {limit}",
            length=length,
            limit=limit,
        )
    prefix = _PREFIX.pack(
        length,
        MAGIC,
        frame.opcode,
        frame.flags,
        frame.stream_id,
        frame.header_format << 24 | len(frame.header),
    )
    return b"".join((prefix, frame.header, frame.payload))
