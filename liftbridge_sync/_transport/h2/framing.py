"""HTTP/2 frames and gRPC messages as bytes: splitting, checking, building.

No I/O and no state: :func:`split_frames` cuts whole frames out of a receive buffer and
checks what RFC 9113 §4–§6 demands of their lengths and stream ids (so that a broker
sending garbage fails the connection with a :class:`FrameError` instead of something
untyped); :func:`split_messages` does the same for gRPC's length-prefixed messages
inside DATA frames. The status tables map HTTP statuses and RST_STREAM codes to gRPC
codes (gRPC's ``http-grpc-status-mapping.md`` and ``PROTOCOL-HTTP2.md``). Every function
here is pure and thread-safe.
"""

from __future__ import annotations

import struct
import urllib.parse

import grpc

from liftbridge_sync.errors import BrokerUnavailableError

__all__ = [
    "without_reserved_bits",
    "ACK",
    "ALTSVC",
    "CODES",
    "DATA",
    "END_STREAM",
    "FRAME_HEADER",
    "FrameError",
    "HTTP_CODES",
    "MAX_FRAME_SIZE",
    "PADDED",
    "PREFIX",
    "PING",
    "RESET_CODES",
    "SETTINGS",
    "check_frame",
    "data_frame_header",
    "grpc_status",
    "ping_frame",
    "split_frames",
    "split_messages",
    "window_update",
]

#: HTTP/2 frame header: 24-bit length and 8-bit type (as one int), flags, stream id.
FRAME_HEADER = struct.Struct(">IBI")
#: gRPC message prefix: compressed flag (always 0 here) and big-endian length.
PREFIX = struct.Struct(">BI")
#: WINDOW_UPDATE frame: length (24 bits) as 16+8, type, flags, stream id, increment.
_WINDOW_UPDATE = struct.Struct(">HBBBII")
#: The SETTINGS_MAX_FRAME_SIZE we announce (the protocol default).
MAX_FRAME_SIZE = 16384
#: gRPC's default limit on a received message (grpc.max_receive_message_length).
MAX_MESSAGE_SIZE = 4 << 20

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0, 1, 2, 3, 4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 5, 6, 7, 8, 9
#: RFC 7838's frame: an extension we do not support, so ignored (RFC 9113 §5.5).
ALTSVC = 10
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
_STREAM_ID = 0x7FFFFFFF

CODES = {code.value[0]: code for code in grpc.StatusCode}
#: HTTP status of a non-gRPC answer → gRPC code.
HTTP_CODES = {
    400: grpc.StatusCode.INTERNAL,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.UNIMPLEMENTED,
    429: grpc.StatusCode.UNAVAILABLE,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.UNAVAILABLE,
}
#: RST_STREAM code → gRPC code; anything else is INTERNAL.
RESET_CODES = {
    0x7: grpc.StatusCode.UNAVAILABLE,  # REFUSED_STREAM
    0x8: grpc.StatusCode.CANCELLED,  # CANCEL
    0xB: grpc.StatusCode.RESOURCE_EXHAUSTED,  # ENHANCE_YOUR_CALM
    0xC: grpc.StatusCode.PERMISSION_DENIED,  # INADEQUATE_SECURITY
}


def http_status_code(status: bytes) -> grpc.StatusCode | None:
    """The gRPC code for a response's ``:status`` (``None`` for 200: no error)."""
    if status == b"200":
        return None
    try:
        http = int(status)
    except ValueError:
        http = 0
    return HTTP_CODES.get(http, grpc.StatusCode.UNKNOWN)


class FrameError(BrokerUnavailableError):
    """The broker sent bytes that are not valid HTTP/2 framing or gRPC messages.

    The connection is unusable; the publisher reconnects (it is retryable). Immutable;
    safe to share between threads.
    """

    retryable = True


#: Frame types that must (True) or must not (False) be on stream 0.
_CONNECTION_LEVEL = {
    DATA: False,
    HEADERS: False,
    PRIORITY: False,
    RST_STREAM: False,
    SETTINGS: True,
    PUSH_PROMISE: False,
    PING: True,
    GOAWAY: True,
    CONTINUATION: False,
}
#: Exact payload lengths.
_LENGTHS = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4}


def check_frame(
    kind: int, flags: int, stream: int, length: int, buf: bytes | bytearray, at: int
) -> None:
    """RFC 9113's framing-level rules for one (non-fast-path) frame.

    Raises:
        FrameError: the frame breaks them.
    """
    on_zero = _CONNECTION_LEVEL.get(kind)
    if on_zero is not None and on_zero != (stream == 0):
        raise FrameError(f"frame type {kind} on stream {stream}", code="UNAVAILABLE")
    expected = _LENGTHS.get(kind)
    if expected is not None and length != expected:
        raise FrameError(f"frame type {kind} of length {length}", code="UNAVAILABLE")
    if kind == SETTINGS and length % 6:
        raise FrameError(f"SETTINGS of length {length}", code="UNAVAILABLE")
    if kind == GOAWAY and length < 8:
        raise FrameError(f"GOAWAY of length {length}", code="UNAVAILABLE")
    if kind in (DATA, HEADERS, PUSH_PROMISE):
        # Fields between the pad length and the data or header block (§6.2, §6.6).
        fixed = 5 if kind == HEADERS and flags & PRIORITY_FLAG else 4 if kind == PUSH_PROMISE else 0
        if flags & PADDED:
            if length < 1 or 1 + fixed + buf[at] > length:
                raise FrameError(f"padding of {length}-byte frame too long", code="UNAVAILABLE")
        elif length < fixed:
            raise FrameError(f"frame type {kind} of length {length}", code="UNAVAILABLE")


def split_frames(
    buf: bytes | bytearray, max_size: int = MAX_FRAME_SIZE, start: int = 0
) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """The whole frames of ``buf`` from ``start`` on, and where they end.

    Each frame is ``(type, flags, stream id, payload start, payload end)``; a partial
    frame at the end is left for the next call.

    Raises:
        FrameError: a frame longer than ``max_size``, or one that breaks the rules on
            stream ids, lengths or padding.
    """
    frames: list[tuple[int, int, int, int, int]] = []
    size = len(buf)
    pos = start
    unpack = FRAME_HEADER.unpack_from
    while size - pos >= 9:
        length_type, flags, stream = unpack(buf, pos)
        length = length_type >> 8
        if length > max_size:
            raise FrameError(f"{length}-byte frame (limit {max_size})", code="UNAVAILABLE")
        end = pos + 9 + length
        if end > size:
            break
        kind = length_type & 0xFF
        stream &= _STREAM_ID
        if kind or flags & PADDED or not stream:
            check_frame(kind, flags, stream, length, buf, pos + 9)
        frames.append((kind, flags, stream, pos + 9, end))
        pos = end
    return frames, pos


def split_messages(
    buf: bytes | bytearray, max_size: int = MAX_MESSAGE_SIZE
) -> tuple[list[bytes], int]:
    """The whole gRPC messages at the start of ``buf`` and how many bytes they take.

    Raises:
        FrameError: a compressed message (we never ask for compression) or one longer
            than ``max_size``.
    """
    messages: list[bytes] = []
    size = len(buf)
    pos = 0
    unpack = PREFIX.unpack_from
    while size - pos >= 5:
        flag, length = unpack(buf, pos)
        if flag:
            raise FrameError("compressed response not asked for", code="INTERNAL")
        if length > max_size:
            raise FrameError(
                f"{length}-byte response (limit {max_size})", code="RESOURCE_EXHAUSTED"
            )
        end = pos + 5 + length
        if end > size:
            break
        messages.append(bytes(buf[pos + 5 : end]))
        pos = end
    return messages, pos


def window_update(stream: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame."""
    return _WINDOW_UPDATE.pack(0, 4, WINDOW_UPDATE, 0, stream, increment)


def data_frame_header(stream: int, length: int) -> bytes:
    """The 9-byte header of a DATA frame of ``length`` bytes on ``stream``, no flags."""
    return FRAME_HEADER.pack(length << 8, 0, stream)


def ping_frame(payload: bytes) -> bytes:
    """A PING frame (not an ACK) with an 8-byte payload."""
    return FRAME_HEADER.pack(8 << 8 | PING, 0, 0) + payload


def grpc_status(fields: dict[bytes, bytes]) -> tuple[int | None, str]:
    """``grpc-status`` (``None`` if absent) and the decoded ``grpc-message``."""
    raw = fields.get(b"grpc-status")
    status: int | None = None
    if raw is not None:
        # 1*DIGIT, as gRPC's HTTP/2 protocol spells it: int() would also take "+14",
        # " 14" and "1_4", and read the last as UNAVAILABLE, which is retried.
        if raw.isdigit() and len(raw) <= 10:  # bytes.isdigit(): ASCII digits only
            status = int(raw)
        else:
            status = grpc.StatusCode.UNKNOWN.value[0]
    message = fields.get(b"grpc-message")
    text = urllib.parse.unquote_to_bytes(message).decode("utf-8", "replace") if message else ""
    return status, text


def without_reserved_bits(frames: bytes | bytearray) -> bytes | bytearray:
    """``frames`` with the reserved bit of each WINDOW_UPDATE's increment cleared.

    RFC 9113 §6.9 says the bit is to be ignored, and the C scanner masks it; h2 4.x
    (hyperframe) reads it as part of the increment and fails the connection with a
    PROTOCOL_ERROR. Frames handed to h2 go through here so both paths agree. ``frames``
    itself is returned when nothing needs clearing (the usual case: no copy); a
    partial frame at the end is left as it is. Thread-safe (pure).
    """
    size = len(frames)
    pos = 0
    copy: bytearray | None = None
    while size - pos >= 9:
        end = pos + 9 + int.from_bytes(frames[pos : pos + 3], "big")
        if end > size:
            break
        if frames[pos + 3] == WINDOW_UPDATE and end - pos == 13 and frames[pos + 9] & 0x80:
            if copy is None:
                copy = bytearray(frames)
            copy[pos + 9] &= 0x7F
        pos = end
    return frames if copy is None else copy
