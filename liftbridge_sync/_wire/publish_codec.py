"""The ``PublishAsync`` bytes: requests out, answers in. The one place that writes them.

Requests. Building a ``PublishRequest`` message, validating its arguments and
serializing it costs about 4 µs per publish; a request that only varies in its value and
correlation id (the common case, :func:`is_common_case`: same stream, partition and ack
policy, no key, headers or expected offset) is the same bytes around those two, so its
framed form is the cached :func:`head` of the other fields, then the value and the id
(:func:`frame_value`, :func:`frame_id`, :func:`frame_values`). A ``bytes`` key adds its
field after the head (:func:`frame_keyed`; a batch's run of them at once,
:func:`frame_pairs`, which also makes ``ByKey``'s choice of head). Everything else goes
through the validating builder and protobuf (:func:`encode_publish` chooses). Framed
means with gRPC's 5-byte message prefix (:func:`frame`), as the h2 transport writes it;
the grpc transport strips the prefix and hands grpcio the message bytes as they are.

Answers. :func:`decode_response` turns one ``PublishResponse`` message into a finished
:class:`~liftbridge_sync.models.Ack` (its ``partition`` is -1: the response does not say,
the publisher's pending entry does) or a :class:`Refusal` (an ack error or an
``asyncError``, with its typed error). :func:`decode_ack` is its common case: the
:class:`Ack` of a plain successful ack, ``None`` for anything else.
:func:`decode_response` raises protobuf's ``DecodeError`` for bytes protobuf rejects.

The C speedups (``liftbridge_sync/_speedups.c``) are a drop-in for :func:`frame_value`,
:func:`frame_id`, :func:`frame_values`, :func:`frame_pairs`, :func:`decode_ack` and
:func:`answers_another_stream` (same
signatures, same results; the C decoder answers ``None`` where protobuf might read a
message differently from a plain one, and :func:`decode_response` then asks protobuf).
They are chosen at the bottom of this module, nowhere else; the pure-Python twins stay
importable as ``py_frame_value`` and so on for the tests that hold both to protobuf.
(The C fast paths that make the publisher's entries, ``frame_entry`` and
``submit_plain``, frame with the same C code as :func:`frame_id`; ``scan_acks`` decodes
with the same C code as :func:`decode_ack`.)

Pure functions; thread-safe: the caches are dicts written with single, idempotent
operations.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.requests import build_publish_request
from liftbridge_sync._wire.status import (
    error_from_ack_error,
    error_from_async_error,
    is_transient_async_error,
)
from liftbridge_sync.errors import LiftbridgeError
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.models._ack import ACK_ERROR_NAMES, ACK_FIELD_NAMES
from liftbridge_sync.partitioners import key_partition

__all__ = [
    "PREFIX_SIZE",
    "Answer",
    "DecodeError",
    "Refusal",
    "ack_from_proto",
    "c_decode_response",
    "decode_ack",
    "decode_response",
    "encode_publish",
    "frame",
    "frame_id",
    "frame_keyed",
    "frame_pairs",
    "frame_value",
    "frame_values",
    "head",
    "is_common_case",
    "py_decode_ack",
    "py_decode_response",
    "py_frame_id",
    "py_frame_pairs",
    "py_frame_value",
    "py_frame_values",
    "answers_another_stream",
    "framed_stream",
    "py_answers_another_stream",
    "set_ack_partition",
    "stream_and_partition",
    "varint",
]

#: gRPC message prefix: compressed flag (always 0) and big-endian length.
_PREFIX = struct.Struct(">BI")
PREFIX_SIZE = _PREFIX.size
_pack_prefix = _PREFIX.pack
#: (stream, partition, ack policy) → serialized fields other than value and id (the C
#: publish_async fast path reads it too: see ``_speedups_submit.c``).
_heads: dict[tuple[str, int, int], bytes] = {}
_KEY_TAG = b"\x0a"  # field 1 (key), length-delimited
_VALUE_TAG = b"\x12"  # field 2 (value), length-delimited
_ID_TAG = b"\x3a"  # field 7 (correlationId), length-delimited
_POLICIES = (AckPolicy.LEADER, AckPolicy.ALL, AckPolicy.NONE)
_SMALL = [bytes([n]) for n in range(128)]
#: Varints of lengths seen (payload sizes repeat).
_varints: dict[int, bytes] = {}


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


def frame(message: bytes) -> bytes:
    """``message`` with its gRPC length prefix."""
    return _pack_prefix(0, len(message)) + message


def head(stream: str, partition: int, ack_policy: AckPolicy) -> bytes:
    """The cached serialized fields of a request other than its value and id.

    Validates ``stream`` and ``ack_policy`` on first use (raises like the builder).
    """
    # An AckPolicy hashes and compares like its int: no int() call on the hot path.
    cached = _heads.get((stream, partition, ack_policy))
    return cached if cached is not None else _head(stream, partition, ack_policy)


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
    cached = request.SerializeToString()
    if len(_heads) >= 4096:
        _heads.clear()
    _heads[(stream, partition, int(ack_policy))] = cached
    return cached


def stream_and_partition(framed: bytes) -> tuple[str, int]:
    """The stream and partition of a framed request."""
    request = api_pb2.PublishRequest.FromString(framed[PREFIX_SIZE:])
    return request.stream, request.partition


def is_common_case(
    stream: object,
    value: object,
    key: object,
    headers: object,
    ack_policy: object,
    expected_offset: object,
) -> bool:
    """Whether a request is a :func:`head` plus a value and an id (no key, headers or
    expected offset; exact ``str``, ``bytes`` and ``AckPolicy`` types)."""
    return (
        type(value) is bytes
        and key is None
        and headers is None
        and expected_offset is None
        and type(stream) is str
        and type(ack_policy) is AckPolicy
    )


def py_frame_value(head: bytes, value: bytes, correlation_id: bytes) -> bytes:
    """The framed request made of a :func:`head`, a value and an (encoded) id."""
    size = len(value)
    id_size = len(correlation_id)
    message = b"".join(
        (
            head,
            _VALUE_TAG,
            _SMALL[size] if size < 128 else varint(size),
            value,
            _ID_TAG,
            _SMALL[id_size] if id_size < 128 else varint(id_size),
            correlation_id,
        )
    )
    return _pack_prefix(0, len(message)) + message


def py_frame_id(head: bytes, value: bytes, prefix: str, n: int) -> tuple[bytes, str]:
    """:func:`frame_value` with the id ``prefix`` + decimal ``n``, and that id."""
    correlation_id = f"{prefix}{n}"
    return py_frame_value(head, value, correlation_id.encode()), correlation_id


def py_frame_values(head: bytes, values: list[object], base: str) -> tuple[list[bytes], list[str]]:
    """:func:`frame_value` for the leading run of ``bytes`` in ``values``, with ids
    ``base + "." + index``; the framed requests and their ids."""
    framed: list[bytes] = []
    ids: list[str] = []
    for i, value in enumerate(values):
        if type(value) is not bytes:
            break
        correlation_id = f"{base}.{i}"
        framed.append(py_frame_value(head, value, correlation_id.encode()))
        ids.append(correlation_id)
    return framed, ids


def frame_keyed(head: bytes, key: bytes | None, value: bytes, correlation_id: bytes) -> bytes:
    """:func:`frame_value` for a request with a key (``None`` or empty: none, as protobuf
    writes an empty key): the key's field goes after the :func:`head`, so a keyed
    request costs one concatenation more than a plain one."""
    if not key:
        return frame_value(head, value, correlation_id)
    size = len(key)
    keyed_head = b"".join((head, _KEY_TAG, _SMALL[size] if size < 128 else varint(size), key))
    return frame_value(keyed_head, value, correlation_id)


def py_frame_pairs(
    heads: list[bytes], items: list[Any], base: str
) -> tuple[list[bytes], list[str], list[int]]:
    """:func:`frame_keyed` for the leading run of ``items`` that are ``bytes`` values or
    ``(key, value)`` pairs (key ``bytes`` or ``None``, value ``bytes``), with ids
    ``base + "." + index``; the framed requests, their ids, and each one's index in
    ``heads``. With one head every item takes it (a fixed partition); with more, an
    item takes the head of the partition :class:`~liftbridge_sync.partitioners.ByKey`
    chooses (:func:`~liftbridge_sync.partitioners.key_partition`), so ``heads[p]`` must
    be the :func:`head` of partition ``p``."""
    framed: list[bytes] = []
    ids: list[str] = []
    chosen: list[int] = []
    count = len(heads)
    for i, item in enumerate(items):
        kind = type(item)
        if kind is bytes:
            key, value = None, item
        elif kind is tuple and len(item) == 2:
            key, value = item
            if type(value) is not bytes or not (key is None or type(key) is bytes):
                break
        else:
            break
        partition = 0 if count == 1 else key_partition(key, count)
        correlation_id = f"{base}.{i}"
        framed.append(frame_keyed(heads[partition], key, value, correlation_id.encode()))
        ids.append(correlation_id)
        chosen.append(partition)
    return framed, ids, chosen


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
    if (key is None or type(key) is bytes) and is_common_case(
        stream, value, None, headers, ack_policy, expected_offset
    ):
        cached = _heads.get((stream, partition, int(ack_policy)))
        if cached is None:
            cached = _head(stream, partition, ack_policy)
        return frame_keyed(cached, key, value, correlation_id.encode())  # type: ignore[arg-type]
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


# --- answers ------------------------------------------------------------------------

_STREAM_TAG = 0x1A  # field 3 (stream), length-delimited


def framed_stream(framed: bytes) -> bytes | None:
    """The UTF-8 stream name of a framed ``PublishRequest``; ``None`` if it has none or
    does not parse (then nothing can be said against an answer's stream).

    Thread-safe: reads its argument only.
    """
    # Protobuf writes fields in number order and a head has no key or value, so the
    # stream comes first in every request this client frames: one look is enough.
    if len(framed) > 7 and framed[5] == _STREAM_TAG and framed[6] < 0x80:
        end = 7 + framed[6]
        return framed[7:end] if end <= len(framed) else None
    pos, end = PREFIX_SIZE, len(framed)
    while pos < end:
        # Tags and lengths as protobuf reads them: at most 5 bytes and 32 bits, and a
        # field number of at least 1.
        start = pos
        tag, pos = _read_varint(framed, pos)
        if pos < 0 or pos - start > 5 or tag > 0xFFFFFFFF or tag >> 3 == 0:
            return None
        wire_type = tag & 7
        if wire_type == 2:
            start = pos
            size, pos = _read_varint(framed, pos)
            if pos < 0 or pos - start > 5 or pos + size > end:
                return None
            if tag == _STREAM_TAG:
                return framed[pos : pos + size]
            pos += size
        elif wire_type == 0:
            _, pos = _read_varint(framed, pos)
        elif wire_type in _FIXED_SIZES:
            pos += _FIXED_SIZES[wire_type]
            if pos > end:
                return None
        else:
            return None  # groups, and wire types protobuf rejects
        if pos < 0:
            return None
    return None


#: The sizes of the fixed-width wire types (fixed64, fixed32).
_FIXED_SIZES = {1: 8, 5: 4}


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; ``(0, -1)`` if malformed."""
    result = shift = 0
    end = min(len(data), pos + 10)
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    return 0, -1


def py_answers_another_stream(answer_stream: str, framed: bytes) -> bool:
    """Whether an answer naming ``answer_stream`` comes from another stream than the
    publish framed as ``framed`` was sent to.

    Streams that share a NATS subject (or listen on a wildcard that covers it) all
    store a publish and all answer it under its correlation id: only the answer of
    the stream published to settles it. An answer that names no stream (an
    ``asyncError``) cannot be told apart: it counts as the publish's own.

    Thread-safe: reads its arguments only.
    """
    if not answer_stream:
        return False
    stream = framed_stream(framed)
    return stream is not None and stream != answer_stream.encode("utf-8", "surrogatepass")


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A response refusing publish ``correlation_id``: an ack with an ack error, or an
    ``asyncError`` (then ``async_code`` is its code)."""

    correlation_id: str
    #: The error the publish fails with (unless the server asks to send it again).
    error: LiftbridgeError
    #: The ``asyncError`` code, ``None`` for an ack error.
    async_code: int | None = None
    #: The server did not store it and takes it if sent again (see
    #: :func:`~liftbridge_sync._wire.status.is_transient_async_error`).
    transient: bool = False
    #: The stream that refused (an ack error names it); ``""`` for an ``asyncError``.
    stream: str = ""


#: What a ``PublishResponse`` decodes to.
Answer = Ack | Refusal

_new = Ack.__new__  # AckCore.__new__ in C: object.__new__ refuses a C base
#: The field descriptors' setters of the frozen ``Ack`` (its AckCore base's members;
#: cheaper than object.__setattr__).
_SETTERS: dict[str, Any] = {name: getattr(Ack, name).__set__ for name in ACK_FIELD_NAMES}
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
#: ``set_ack_partition(ack, partition)``: fills in the partition of a decoded
#: :class:`Ack` (``-1`` until then) before anybody else sees it.
set_ack_partition: Callable[[Ack, int], None] = _set_partition


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


_parse = api_pb2.PublishResponse.FromString


def _plain_ack(response: api_pb2.PublishResponse) -> Ack | None:
    """The :class:`Ack` of a plain successful ack (an ``ack`` with an id and no ack
    error, no ``asyncError``); ``None`` otherwise."""
    if response.HasField("asyncError") or not response.HasField("ack"):
        return None
    ack = response.ack
    if ack.ackError or not ack.correlationId:
        return None
    return ack_from_proto(ack, -1)


def py_decode_ack(message: bytes) -> Ack | None:
    """The :class:`Ack` (``partition`` -1) of a ``PublishResponse`` that is a plain
    successful ack; ``None`` for anything else, malformed bytes included."""
    try:
        response = _parse(message)
    except DecodeError:
        return None
    return _plain_ack(response)


def _answer(response: api_pb2.PublishResponse) -> Answer:
    """What a parsed response says (see :func:`decode_response`)."""
    ack = response.ack
    correlation_id = ack.correlationId
    if not correlation_id:
        # An asyncError (or an ack without an id): the id is on the response.
        if response.HasField("asyncError"):
            error = response.asyncError
            return Refusal(
                response.correlationId,
                error_from_async_error(error.code, error.message),
                error.code,
                is_transient_async_error(error.code, error.message),
            )
        correlation_id = response.correlationId
    if ack.ackError:
        return Refusal(
            correlation_id,
            error_from_ack_error(ACK_ERROR_NAMES.get(ack.ackError, "UNKNOWN")),
            stream=ack.stream,
        )
    decoded = ack_from_proto(ack, -1)
    if not ack.correlationId:
        _set_correlation_id(decoded, correlation_id)
    return decoded


def py_decode_response(message: bytes) -> Answer:
    """A ``PublishResponse`` message (without its gRPC prefix) as a finished
    :class:`Ack` (``partition`` -1: :func:`set_ack_partition` fills it in) or a
    :class:`Refusal`. An ack without a correlation id takes the response's.

    Raises:
        DecodeError: bytes protobuf does not read as a ``PublishResponse`` (the
            transport ends the stream with an INTERNAL error).
    """
    response = _parse(message)
    ack = _plain_ack(response)
    return ack if ack is not None else _answer(response)


def c_decode_response(message: bytes) -> Answer:
    """:func:`py_decode_response` with the C :func:`decode_ack` trying first (protobuf
    parses only what it leaves)."""
    ack = decode_ack(message)
    return ack if ack is not None else _answer(_parse(message))


# --- the one choice between C and Python ---------------------------------------------

frame_value: Callable[[bytes, bytes, bytes], bytes] = py_frame_value
frame_id: Callable[[bytes, bytes, str, int], tuple[bytes, str]] = py_frame_id
frame_values: Callable[[bytes, list[object], str], tuple[list[bytes], list[str]]] = py_frame_values
frame_pairs: Callable[[list[bytes], list[Any], str], tuple[list[bytes], list[str], list[int]]] = (
    py_frame_pairs
)
decode_ack: Callable[[bytes], Ack | None] = py_decode_ack
#: See :func:`py_decode_response`.
decode_response: Callable[[bytes], Answer] = py_decode_response
#: See :func:`py_answers_another_stream`.
answers_another_stream: Callable[[str, bytes], bool] = py_answers_another_stream

if speedups.ACTIVE:
    from liftbridge_sync import _speedups

    frame_value = _speedups.frame_value
    frame_id = _speedups.frame_id
    frame_values = _speedups.frame_values
    frame_pairs = _speedups.frame_pairs
    decode_ack = _speedups.decode_ack
    decode_response = c_decode_response
    answers_another_stream = _speedups.answers_another_stream
