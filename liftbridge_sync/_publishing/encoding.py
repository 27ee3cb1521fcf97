"""Publish requests straight to gRPC frames, and acks straight to :class:`Ack` objects.

Building a ``PublishRequest`` message, validating its arguments and serializing it costs
about 4 µs per publish; a request that only varies in its value and correlation id
(the common case: same stream, partition and ack policy, no key, headers or expected
offset) is the same bytes around those two, so its framed form is concatenated from a
cached prefix instead (< 1 µs). Everything else goes through the validating builder and
protobuf. On the way back, :func:`ack_from_proto` fills a slotted :class:`Ack` without
its frozen dataclass ``__init__``. Thread-safe: the caches are dicts written with single,
idempotent operations.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.requests import build_publish_request
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.models._ack import ACK_ERROR_NAMES

__all__ = [
    "ack_from_proto",
    "encode_publish",
    "frame",
    "frame_simple",
    "head",
    "set_ack_partition",
    "varint",
]

#: gRPC message prefix: compressed flag (always 0) and big-endian length.
_PREFIX = struct.Struct(">BI")
_pack_prefix = _PREFIX.pack
#: (stream, partition, ack policy) → serialized fields other than value and id.
_heads: dict[tuple[str, int, int], bytes] = {}
_VALUE_TAG = b"\x12"  # field 2 (value), length-delimited
_ID_TAG = b"\x3a"  # field 7 (correlationId), length-delimited
_POLICIES = (AckPolicy.LEADER, AckPolicy.ALL, AckPolicy.NONE)
_SMALL = [bytes([n]) for n in range(128)]


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of ``n`` (``0 <= n < 2**64``)."""
    if n < 128:
        return _SMALL[n]
    cached = _varints.get(n)
    if cached is not None:
        return cached
    out = bytearray()
    m = n
    while m >= 128:
        out.append((m & 0x7F) | 0x80)
        m >>= 7
    out.append(m)
    if len(_varints) < 8192:
        _varints[n] = bytes(out)
    return bytes(out)


#: Varints of lengths seen (payload sizes repeat).
_varints: dict[int, bytes] = {}


def head(stream: str, partition: int, ack_policy: AckPolicy) -> bytes:
    """The cached serialized fields of a request other than its value and id.

    Validates ``stream`` and ``ack_policy`` on first use (raises like the builder).
    """
    # An AckPolicy hashes and compares like its int: no int() call on the hot path.
    cached = _heads.get((stream, partition, ack_policy))
    return cached if cached is not None else _head(stream, partition, ack_policy)


def frame_simple(head: bytes, value: bytes, correlation_id: bytes) -> bytes:
    """The framed request made of a :func:`head`, a value and an (ASCII) id."""
    size = len(value)
    size_varint = _SMALL[size] if size < 128 else varint(size)
    id_size = len(correlation_id)
    total = len(head) + len(size_varint) + size + id_size + 3
    return b"".join(
        (
            _pack_prefix(0, total),
            head,
            _VALUE_TAG,
            size_varint,
            value,
            _ID_TAG,
            _SMALL[id_size],
            correlation_id,
        )
    )


def frame(message: bytes) -> bytes:
    """``message`` with its gRPC length prefix."""
    return _pack_prefix(0, len(message)) + message


def _head(stream: str, partition: int, ack_policy: AckPolicy) -> bytes:
    """Validate once, then serialize everything but the value and correlation id."""
    request = build_publish_request(
        stream,
        b"",
        partition=partition,
        key=None,
        headers=None,
        ack_policy=ack_policy,
        expected_offset=None,
        correlation_id="",
    )
    head = request.SerializeToString()
    if len(_heads) >= 4096:
        _heads.clear()
    _heads[(stream, partition, int(ack_policy))] = head
    return head


def encode_publish(
    stream: str,
    value: object,
    *,
    partition: int,
    key: object,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str,
) -> bytes:
    """The framed ``PublishRequest`` (gRPC length prefix included).

    Validates like :func:`~liftbridge_sync._wire.requests.build_publish_request` and
    raises the same errors (``TypeError``, ``ConfigurationError``) before any I/O.
    ``partition`` must already be checked.
    """
    if (
        type(value) is bytes
        and key is None
        and headers is None
        and expected_offset is None
        and type(stream) is str
        and type(ack_policy) is AckPolicy
    ):
        head = _heads.get((stream, partition, int(ack_policy)))
        if head is None:
            head = _head(stream, partition, ack_policy)
        cid = correlation_id.encode()
        size = len(value)
        message = b"".join(
            (
                head,
                _VALUE_TAG,
                _SMALL[size] if size < 128 else varint(size),
                value,
                _ID_TAG,
                _SMALL[len(cid)] if len(cid) < 128 else varint(len(cid)),
                cid,
            )
        )
        return _pack_prefix(0, len(message)) + message
    request = build_publish_request(
        stream,
        value,
        partition=partition,
        key=key,
        headers=headers,
        ack_policy=ack_policy,
        expected_offset=expected_offset,
        correlation_id=correlation_id,
    )
    return frame(request.SerializeToString())


_new = object.__new__
#: The slot descriptors' setters of the frozen ``Ack`` (cheaper than object.__setattr__).
_SETTERS: dict[str, Any] = {
    name: getattr(Ack, name).__set__
    for name in (
        "stream",
        "partition",
        "partition_subject",
        "message_subject",
        "offset",
        "ack_inbox",
        "correlation_id",
        "ack_policy",
        "reception_timestamp_ns",
        "commit_timestamp_ns",
        "ack_error",
    )
}
_set_stream = _SETTERS["stream"]
_set_partition = _SETTERS["partition"]
_set_partition_subject = _SETTERS["partition_subject"]
_set_message_subject = _SETTERS["message_subject"]
_set_offset = _SETTERS["offset"]
_set_ack_inbox = _SETTERS["ack_inbox"]
_set_correlation_id = _SETTERS["correlation_id"]
_set_ack_policy = _SETTERS["ack_policy"]
_set_reception = _SETTERS["reception_timestamp_ns"]
_set_commit = _SETTERS["commit_timestamp_ns"]
_set_ack_error = _SETTERS["ack_error"]
#: ``set_ack_partition(ack, partition)``: fills in the partition of an :class:`Ack` the
#: C reader built (``-1`` there) before anybody else sees it.
set_ack_partition: Any = _set_partition


def ack_from_proto(pb: api_pb2.Ack, partition: int) -> Ack:
    """Same as ``Ack.from_proto(pb, partition=partition)``, several times cheaper."""
    ack: Ack = _new(Ack)
    _set_stream(ack, pb.stream)
    _set_partition(ack, partition)
    _set_partition_subject(ack, pb.partitionSubject)
    _set_message_subject(ack, pb.msgSubject)
    _set_offset(ack, pb.offset)
    _set_ack_inbox(ack, pb.ackInbox)
    _set_correlation_id(ack, pb.correlationId)
    policy = pb.ackPolicy
    _set_ack_policy(ack, _POLICIES[policy] if 0 <= policy < 3 else AckPolicy.LEADER)
    _set_reception(ack, pb.receptionTimestamp)
    _set_commit(ack, pb.commitTimestamp)
    error = pb.ackError
    _set_ack_error(ack, ACK_ERROR_NAMES.get(error, "UNKNOWN") if error else None)
    return ack
