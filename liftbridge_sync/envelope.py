"""The Liftbridge envelope: the framing of direct NATS publishes and of acks.

An envelope is an 8-byte header (12 with a CRC), then a protobuf payload::

    B9 0E 43 B4 | version 0 | HeaderLen | Flags | MsgType | [CRC-32C, big-endian] | payload

HeaderLen is the offset of the payload (8, or 12 when flag bit 0 says a CRC-32C of the
payload follows the fixed header). :func:`new_message` builds a publish envelope
(``MsgType`` 0) for a NATS partition subject; :func:`unmarshal_ack` reads what the
partition leader sends to an ack inbox (``MsgType`` 1). Decoding is strict: every
malformed input raises :class:`~liftbridge_sync.errors.EnvelopeError` naming the check
that failed, never an ``IndexError`` or a protobuf exception.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from typing import Final, TypeAlias

import crc32c

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.validate import (
    check_ack_policy,
    check_bool,
    check_bytes,
    check_headers,
    check_int,
    check_optional_text,
    check_publish_subject,
)
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError, EnvelopeError
from liftbridge_sync.models import Ack, AckPolicy, Message

__all__ = [
    "MAGIC",
    "VERSION",
    "MessageType",
    "check_raw_payload",
    "decode_ack_pb",
    "decode_envelope",
    "decode_message_pb",
    "encode_envelope",
    "new_message",
    "unmarshal_ack",
    "unmarshal_message",
]

#: The four bytes every envelope starts with (chosen to be invalid UTF-8).
MAGIC: Final = b"\xb9\x0e\x43\xb4"
#: The only envelope version there is.
VERSION: Final = 0

_HEADER_LEN: Final = 8
_CRC_HEADER_LEN: Final = 12
_FLAG_CRC: Final = 0x01
_INT64_MAX: Final = 2**63 - 1
_HEADER = struct.Struct(">4sBBBB")
_CRC = struct.Struct(">I")

_BytesLike: TypeAlias = bytes | bytearray | memoryview


class MessageType(enum.IntEnum):
    """Envelope message types (the server's enum, in its order).

    Only ``PUBLISH`` and ``ACK`` concern clients; the rest are server-internal.
    Immutable; safe to share between threads.
    """

    PUBLISH = 0
    ACK = 1
    REPLICATION_REQUEST = 2
    REPLICATION_RESPONSE = 3
    RAFT_JOIN_REQUEST = 4
    RAFT_JOIN_RESPONSE = 5
    LEADER_EPOCH_OFFSET_REQUEST = 6
    LEADER_EPOCH_OFFSET_RESPONSE = 7
    PROPAGATED_REQUEST = 8
    PROPAGATED_RESPONSE = 9
    SERVER_INFO_REQUEST = 10
    SERVER_INFO_RESPONSE = 11
    PARTITION_STATUS_REQUEST = 12
    PARTITION_STATUS_RESPONSE = 13
    PARTITION_NOTIFICATION = 14


def _check_msg_type(name: str, value: object) -> int:
    """``value`` as a message type: an int (a :class:`MessageType` is one) in 0..255."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be a MessageType or int, not {type(value).__name__}")
    if not 0 <= value <= 0xFF:
        raise ConfigurationError(f"{name} must be in 0..255, got {value}")
    return value


def _type_name(value: int) -> str:
    try:
        return f"{MessageType(value).name} ({value})"
    except ValueError:
        return f"unknown ({value})"


def encode_envelope(payload: _BytesLike, msg_type: MessageType | int, *, crc: bool) -> bytes:
    """Frame ``payload`` in an envelope.

    Args:
        payload: The serialized protobuf (or any bytes).
        msg_type: The envelope message type, 0-255.
        crc: Whether to add the CRC-32C of the payload (HeaderLen 12, flag bit 0); a
            ``bool``.

    Returns:
        The envelope bytes.

    Raises:
        ArgumentTypeError: ``payload`` is not bytes-like, ``msg_type`` not an int, or
            ``crc`` not a ``bool`` (a ``ConfigurationError`` and a ``TypeError``).
        ConfigurationError: ``msg_type`` does not fit in a byte.
    """
    data = _as_bytes(payload, "payload")
    msg_type = _check_msg_type("msg_type", msg_type)
    if check_bool("crc", crc):
        header = _HEADER.pack(MAGIC, VERSION, _CRC_HEADER_LEN, _FLAG_CRC, msg_type)
        return header + _CRC.pack(crc32c.crc32c(data)) + data
    return _HEADER.pack(MAGIC, VERSION, _HEADER_LEN, 0, msg_type) + data


def decode_envelope(data: _BytesLike, expected_type: MessageType | int) -> bytes:
    """Check an envelope's header (and CRC, when present) and return its payload.

    Accepts what the server accepts: an 8-byte envelope with an empty payload, and a
    HeaderLen above 8 without a CRC (the extra header bytes are skipped).

    Args:
        data: The envelope bytes.
        expected_type: The message type the caller wants.

    Returns:
        The payload bytes (possibly empty).

    Raises:
        EnvelopeError: The data is not a valid envelope of ``expected_type``; the message
            names the failed check.
        ArgumentTypeError: ``data`` is not bytes-like, or ``expected_type`` not an int
            (a ``ConfigurationError`` and a ``TypeError``).
        ConfigurationError: ``expected_type`` does not fit in a byte.
    """
    expected_type = _check_msg_type("expected_type", expected_type)
    raw = _as_bytes(data, "data")
    size = len(raw)
    if size < _HEADER_LEN:
        raise EnvelopeError(f"envelope too short: {size} bytes, need at least {_HEADER_LEN}")
    magic, version, header_len, flags, msg_type = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise EnvelopeError(f"wrong magic number {magic.hex()} (expected {MAGIC.hex()})")
    if version != VERSION:
        raise EnvelopeError(f"unsupported envelope version {version} (only {VERSION} is known)")
    if msg_type != expected_type:
        raise EnvelopeError(
            f"wrong message type: expected {_type_name(expected_type)}, got {_type_name(msg_type)}"
        )
    has_crc = bool(flags & _FLAG_CRC)
    if has_crc and header_len != _CRC_HEADER_LEN:
        raise EnvelopeError(
            f"incorrect envelope header size: CRC flag set but HeaderLen is {header_len} "
            f"(must be {_CRC_HEADER_LEN})"
        )
    if header_len < _HEADER_LEN:
        raise EnvelopeError(f"HeaderLen {header_len} is below the minimum of {_HEADER_LEN}")
    if header_len > size:
        raise EnvelopeError(f"HeaderLen {header_len} is beyond the data length {size}")
    payload = raw[header_len:]
    if has_crc:
        (expected_crc,) = _CRC.unpack_from(raw, _HEADER_LEN)
        actual_crc = crc32c.crc32c(payload)
        if actual_crc != expected_crc:
            raise EnvelopeError(
                f"CRC mismatch: header says {expected_crc:#010x}, payload has {actual_crc:#010x}"
            )
    return payload


def check_raw_payload(name: str, data: bytes) -> bytes:
    """Refuse plain NATS data that a Liftbridge partition leader would crash on.

    A leader reads every message on its subject as an envelope first, and the server
    (v1.9.0 and later) slices the payload at HeaderLen before it checks anything past
    the version: data that starts with the magic number and version 0 but whose
    HeaderLen byte is beyond its length panics the broker process, whatever the message
    type or flags (e.g. the 8 bytes ``B9 0E 43 B4 00 FF 00 00``). Any other data is
    stored verbatim or read as the envelope it is.

    Returns:
        ``data``.

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        ConfigurationError: ``data`` is such an envelope header.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ArgumentTypeError(f"{name!r} must be bytes-like, got {type(data).__name__}")
    if len(data) >= _HEADER_LEN and data[:4] == MAGIC and data[4] == VERSION:
        header_len = data[5]
        if header_len > len(data):
            raise ConfigurationError(
                f"{name!r} starts with a Liftbridge envelope header whose HeaderLen "
                f"({header_len}) is beyond its {len(data)} bytes: the partition leader "
                "would crash on it"
            )
    return data


def decode_message_pb(data: _BytesLike) -> api_pb2.Message:
    """Decode a publish envelope (``MsgType`` 0) into the wire ``Message``.

    Unlike :func:`unmarshal_message` this keeps the publish-only fields
    (``ackInbox``, ``correlationId``, ``ackPolicy``); a fake leader in tests needs them.

    Raises:
        EnvelopeError: Bad envelope or undecodable protobuf.
    """
    pb = api_pb2.Message()
    _parse(pb, decode_envelope(data, MessageType.PUBLISH), "Message")
    return pb


def decode_ack_pb(data: _BytesLike) -> api_pb2.Ack:
    """Decode an ack envelope (``MsgType`` 1) into the wire ``Ack``.

    Raises:
        EnvelopeError: Bad envelope or undecodable protobuf.
    """
    pb = api_pb2.Ack()
    _parse(pb, decode_envelope(data, MessageType.ACK), "Ack")
    return pb


def unmarshal_message(data: _BytesLike) -> Message:
    """Decode a publish envelope (``MsgType`` 0).

    The result's ``offset`` is the envelope's expected offset (-1 = no check); the
    partition is 0 and stream/subject are empty unless the envelope set them.

    Raises:
        EnvelopeError: Bad envelope or undecodable protobuf.
    """
    return Message.from_proto(decode_message_pb(data))


def unmarshal_ack(data: _BytesLike) -> Ack:
    """Decode an ack envelope (``MsgType`` 1) as sent by a partition leader.

    The wire ack does not say which partition it is for, so ``partition`` is -1.

    Raises:
        EnvelopeError: Bad envelope or undecodable protobuf.
    """
    return Ack.from_proto(decode_ack_pb(data), partition=-1)


def _parse(pb: api_pb2.Message | api_pb2.Ack, payload: bytes, name: str) -> None:
    try:
        pb.ParseFromString(payload)
    except Exception as exc:  # DecodeError, or whatever else the backend raises
        raise EnvelopeError(f"undecodable {name} protobuf: {exc}") from exc


def new_message(
    value: _BytesLike,
    *,
    key: _BytesLike | None = None,
    headers: Mapping[str, _BytesLike] | None = None,
    ack_inbox: str | None = None,
    correlation_id: str | None = None,
    ack_policy: AckPolicy = AckPolicy.LEADER,
    expected_offset: int | None = None,
    crc: bool = True,
) -> bytes:
    """Build a publish envelope for a NATS partition subject.

    Args:
        value: The payload.
        key: The message key (``None`` or empty for none).
        headers: Message headers, ``str`` names to bytes-like values.
        ack_inbox: NATS subject where the leader sends the ack (none if ``None``); no
            wildcard tokens (it is published to).
        correlation_id: Copied into the ack.
        ack_policy: When the leader acks.
        expected_offset: Optimistic concurrency: the offset the message must get.
            ``None`` means no check (the wire gets -1, not the proto default 0); else
            an int >= 0, as for ``Client.publish``.
        crc: Add the CRC-32C of the payload to the header.

    Returns:
        The envelope bytes.

    Raises:
        ArgumentTypeError: An argument has the wrong type (e.g. a ``str`` value: encode
            it); it is also a ``TypeError``.
        ConfigurationError: An argument has an invalid value (the same checks as
            ``Client.publish``).
    """
    pb = api_pb2.Message(
        offset=_check_offset(expected_offset),
        value=check_bytes("value", value),
        ackPolicy=int(check_ack_policy(ack_policy)),  # type: ignore[arg-type]
    )
    if key is not None:
        pb.key = check_bytes("key", key) or b""
    if headers is not None:
        pb.headers.update(check_headers(headers))
    if ack_inbox is not None:
        pb.ackInbox = check_publish_subject("ack_inbox", ack_inbox)
    if correlation_id is not None:
        pb.correlationId = check_optional_text("correlation_id", correlation_id) or ""
    return encode_envelope(pb.SerializeToString(), MessageType.PUBLISH, crc=crc)


def _check_offset(expected_offset: object) -> int:
    if expected_offset is None:
        return -1
    return check_int("expected_offset", expected_offset, minimum=0)


def _as_bytes(value: object, name: str) -> bytes:
    checked = check_bytes(name, value)
    assert checked is not None  # check_bytes returns None only when optional
    return checked
