"""Envelope encoding and decoding (liftbridge-api.md §3)."""

from __future__ import annotations

import re
import struct

import crc32c
import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.envelope import (
    MAGIC,
    MessageType,
    check_raw_payload,
    decode_ack_pb,
    decode_envelope,
    decode_message_pb,
    encode_envelope,
    new_message,
    unmarshal_ack,
    unmarshal_message,
)
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError, EnvelopeError
from liftbridge_sync.models import Ack, AckPolicy, Message

# liftbridge-api.md §3.6
VECTOR_PAYLOAD = bytes.fromhex("08ffffffffffffffffff011a0568656c6c6f520661636b732e315a0263316001")
VECTOR_NO_CRC = bytes.fromhex(
    "b90e43b40008000008ffffffffffffffffff011a0568656c6c6f520661636b732e315a0263316001"
)
VECTOR_CRC = bytes.fromhex(
    "b90e43b4000c01006e8e951908ffffffffffffffffff011a0568656c6c6f520661636b732e315a0263316001"
)
VECTOR_EMPTY = bytes.fromhex("b90e43b400080000")


def vector_message(*, crc: bool) -> bytes:
    return new_message(
        b"hello", ack_inbox="acks.1", correlation_id="c1", ack_policy=AckPolicy.ALL, crc=crc
    )


# --- test vectors -------------------------------------------------------------------


def test_crc32c_check_value() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_vector_payload_crc() -> None:
    assert len(VECTOR_PAYLOAD) == 32
    assert crc32c.crc32c(VECTOR_PAYLOAD) == 0x6E8E9519


def test_vector_without_crc() -> None:
    assert vector_message(crc=False) == VECTOR_NO_CRC


def test_vector_with_crc() -> None:
    assert vector_message(crc=True) == VECTOR_CRC


def test_crc_is_the_default() -> None:
    assert new_message(
        b"hello", ack_inbox="acks.1", correlation_id="c1", ack_policy=AckPolicy.ALL
    ) == (VECTOR_CRC)


def test_encode_envelope_matches_vectors() -> None:
    assert encode_envelope(VECTOR_PAYLOAD, MessageType.PUBLISH, crc=False) == VECTOR_NO_CRC
    assert encode_envelope(VECTOR_PAYLOAD, MessageType.PUBLISH, crc=True) == VECTOR_CRC
    assert encode_envelope(b"", 0, crc=False) == VECTOR_EMPTY


@pytest.mark.parametrize("data", [VECTOR_NO_CRC, VECTOR_CRC])
def test_vectors_decode(data: bytes) -> None:
    assert decode_envelope(data, MessageType.PUBLISH) == VECTOR_PAYLOAD
    pb = decode_message_pb(data)
    assert (pb.offset, pb.value, pb.ackInbox, pb.correlationId, int(pb.ackPolicy)) == (
        -1,
        b"hello",
        "acks.1",
        "c1",
        1,
    )
    msg = unmarshal_message(data)
    assert msg == Message(
        offset=-1, key=None, value=b"hello", partition=0, stream="", subject="", reply_subject=""
    )


def test_empty_message_is_accepted() -> None:
    assert decode_envelope(VECTOR_EMPTY, MessageType.PUBLISH) == b""
    msg = unmarshal_message(VECTOR_EMPTY)
    assert (msg.offset, msg.key, msg.value, dict(msg.headers)) == (0, None, b"", {})


def test_message_type_values() -> None:
    assert len(MessageType) == 15
    assert [int(t) for t in MessageType] == list(range(15))
    assert int(MessageType.PUBLISH) == 0
    assert int(MessageType.ACK) == 1
    assert int(MessageType.PARTITION_NOTIFICATION) == 14
    assert MAGIC == b"\xb9\x0e\x43\xb4"


# --- round trips --------------------------------------------------------------------


@pytest.mark.parametrize("crc", [False, True])
def test_round_trip_every_field(crc: bool) -> None:
    data = new_message(
        b"value",
        key=b"key",
        headers={"h1": b"v1", "empty": b"", "bin": b"\x00\xff"},
        ack_inbox="_INBOX.x",
        correlation_id="corr-1",
        ack_policy=AckPolicy.NONE,
        expected_offset=42,
        crc=crc,
    )
    assert data[5] == (12 if crc else 8)
    assert data[6] == (1 if crc else 0)
    assert data[7] == MessageType.PUBLISH
    msg = unmarshal_message(data)
    assert msg.key == b"key"
    assert msg.value == b"value"
    assert dict(msg.headers) == {"h1": b"v1", "empty": b"", "bin": b"\x00\xff"}
    assert msg.offset == 42
    assert msg.partition == 0
    assert (msg.stream, msg.subject, msg.reply_subject, msg.timestamp_ns) == ("", "", "", 0)
    pb = decode_message_pb(data)
    assert (pb.ackInbox, pb.correlationId, pb.ackPolicy) == ("_INBOX.x", "corr-1", 2)


@pytest.mark.parametrize(
    ("expected_offset", "wire"), [(None, -1), (0, 0), (7, 7), (2**63 - 1, 2**63 - 1)]
)
def test_expected_offset_on_the_wire(expected_offset: int | None, wire: int) -> None:
    data = new_message(b"v", expected_offset=expected_offset)
    assert decode_message_pb(data).offset == wire
    assert unmarshal_message(data).offset == wire


def test_defaults_leave_optional_fields_unset() -> None:
    pb = decode_message_pb(new_message(b"v"))
    assert pb.key == b""
    assert dict(pb.headers) == {}
    assert (pb.ackInbox, pb.correlationId, int(pb.ackPolicy)) == ("", "", 0)
    assert unmarshal_message(new_message(b"v", key=b"")).key is None


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_bytes_like_inputs(kind: type) -> None:
    data = new_message(kind(b"val"), key=kind(b"k"), headers={"h": kind(b"x")})
    msg = unmarshal_message(kind(data))
    assert (msg.value, msg.key, msg.headers["h"]) == (b"val", b"k", b"x")
    assert type(msg.value) is bytes
    assert decode_envelope(kind(data), 0) == decode_envelope(data, 0)


def test_ack_round_trip() -> None:
    wire = api_pb2.Ack(
        stream="orders",
        partitionSubject="orders",
        msgSubject="orders.2",
        offset=99,
        ackInbox="_INBOX.a",
        correlationId="c-9",
        ackPolicy=api_pb2.ALL,
        receptionTimestamp=1_700_000_000_000_000_001,
        commitTimestamp=1_700_000_000_000_000_002,
    )
    data = encode_envelope(wire.SerializeToString(), MessageType.ACK, crc=False)
    assert data[:8] == bytes.fromhex("b90e43b400080001")
    assert unmarshal_ack(data) == Ack(
        stream="orders",
        partition=-1,
        partition_subject="orders",
        message_subject="orders.2",
        offset=99,
        ack_inbox="_INBOX.a",
        correlation_id="c-9",
        ack_policy=AckPolicy.ALL,
        reception_timestamp_ns=1_700_000_000_000_000_001,
        commit_timestamp_ns=1_700_000_000_000_000_002,
    )
    assert decode_ack_pb(data) == wire
    with_crc = encode_envelope(wire.SerializeToString(), MessageType.ACK, crc=True)
    assert unmarshal_ack(with_crc) == unmarshal_ack(data)


def test_error_ack() -> None:
    wire = api_pb2.Ack(correlationId="c", ackError=api_pb2.Ack.INCORRECT_OFFSET)
    ack = unmarshal_ack(encode_envelope(wire.SerializeToString(), MessageType.ACK, crc=False))
    assert ack.ack_error == "INCORRECT_OFFSET"
    assert ack.offset == 0


def test_empty_ack_is_accepted() -> None:
    ack = unmarshal_ack(bytes.fromhex("b90e43b400080001"))
    assert (ack.stream, ack.offset, ack.correlation_id, ack.ack_error) == ("", 0, "", None)


def test_header_len_above_8_without_crc_skips_extra_bytes() -> None:
    payload = api_pb2.Message(offset=5, value=b"abc").SerializeToString()
    data = MAGIC + bytes([0, 11, 0, 0]) + b"\xde\xad\xbe" + payload
    assert decode_envelope(data, 0) == payload
    assert unmarshal_message(data).value == b"abc"
    # HeaderLen == len(data): empty payload
    assert decode_envelope(MAGIC + bytes([0, 10, 0, 0]) + b"xx", 0) == b""


def test_other_flag_bits_are_ignored() -> None:
    data = bytearray(VECTOR_NO_CRC)
    data[6] = 0xFE
    assert decode_envelope(bytes(data), 0) == VECTOR_PAYLOAD
    data = bytearray(VECTOR_CRC)
    data[6] = 0xFF
    assert decode_envelope(bytes(data), 0) == VECTOR_PAYLOAD


def test_encode_envelope_any_type_byte() -> None:
    data = encode_envelope(b"p", 200, crc=False)
    assert data[7] == 200
    assert decode_envelope(data, 200) == b"p"


# --- decode errors ------------------------------------------------------------------


def _with(base: bytes, index: int, value: int) -> bytes:
    data = bytearray(base)
    data[index] = value
    return bytes(data)


DECODE_ERRORS = [
    pytest.param(b"", "too short: 0 bytes", id="empty"),
    pytest.param(VECTOR_EMPTY[:7], "too short: 7 bytes", id="seven-bytes"),
    pytest.param(b"hello world", "wrong magic", id="plain-data"),
    pytest.param(_with(VECTOR_NO_CRC, 3, 0xB5), "wrong magic", id="magic"),
    pytest.param(_with(VECTOR_NO_CRC, 4, 1), "unsupported envelope version 1", id="version"),
    pytest.param(_with(VECTOR_NO_CRC, 7, 1), "expected PUBLISH (0), got ACK (1)", id="type-ack"),
    pytest.param(
        _with(VECTOR_NO_CRC, 7, 99), "expected PUBLISH (0), got unknown (99)", id="type-unknown"
    ),
    pytest.param(
        _with(VECTOR_NO_CRC, 6, 1),
        "CRC flag set but HeaderLen is 8 (must be 12)",
        id="crc-flag-header-8",
    ),
    pytest.param(
        _with(VECTOR_CRC, 5, 16), "CRC flag set but HeaderLen is 16", id="crc-flag-header-16"
    ),
    pytest.param(_with(VECTOR_NO_CRC, 5, 7), "HeaderLen 7 is below the minimum", id="header-7"),
    pytest.param(_with(VECTOR_NO_CRC, 5, 0), "HeaderLen 0 is below the minimum", id="header-0"),
    pytest.param(
        _with(VECTOR_NO_CRC, 5, 200), "HeaderLen 200 is beyond the data length 40", id="beyond"
    ),
    pytest.param(VECTOR_CRC[:10], "HeaderLen 12 is beyond the data length 10", id="crc-cut"),
    pytest.param(_with(VECTOR_CRC, 11, 0x18), "CRC mismatch", id="crc-field"),
    pytest.param(_with(VECTOR_CRC, 20, 0x00), "CRC mismatch", id="crc-payload"),
    pytest.param(VECTOR_CRC[:-1], "CRC mismatch", id="crc-truncated"),
    pytest.param(MAGIC + bytes([0, 8, 0, 0]) + b"\xff", "undecodable Message", id="protobuf"),
    pytest.param(
        # field 10 (ackInbox, string) holding invalid UTF-8
        MAGIC + bytes([0, 8, 0, 0]) + b"\x52\x01\xff",
        "undecodable Message",
        id="protobuf-utf8",
    ),
    pytest.param(VECTOR_NO_CRC[:-3], "undecodable Message", id="protobuf-truncated"),
]


@pytest.mark.parametrize(("data", "match"), DECODE_ERRORS)
def test_unmarshal_message_errors(data: bytes, match: str) -> None:
    with pytest.raises(EnvelopeError, match=re.escape(match)):
        unmarshal_message(data)


def test_protobuf_error_is_chained() -> None:
    with pytest.raises(EnvelopeError) as info:
        unmarshal_message(MAGIC + bytes([0, 8, 0, 0]) + b"\xff")
    assert isinstance(info.value.__cause__, DecodeError)


def test_unmarshal_ack_errors() -> None:
    with pytest.raises(EnvelopeError, match=re.escape("expected ACK (1), got PUBLISH (0)")):
        unmarshal_ack(VECTOR_NO_CRC)
    with pytest.raises(EnvelopeError, match="too short"):
        unmarshal_ack(b"\xb9\x0e")
    with pytest.raises(EnvelopeError, match="undecodable Ack"):
        unmarshal_ack(MAGIC + bytes([0, 8, 0, 1]) + b"\x0a\x05ab")


def test_envelope_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="wrong magic"):
        decode_envelope(b"\x00" * 8, 0)


@pytest.mark.parametrize("bad", ["text", None, 42, [1, 2]])
def test_decode_rejects_non_bytes(bad: object) -> None:
    with pytest.raises(TypeError):
        decode_envelope(bad, 0)  # type: ignore[arg-type]


# --- new_message validation ---------------------------------------------------------


def test_str_value_raises_type_error_saying_encode() -> None:
    with pytest.raises(TypeError, match=r"value must be bytes-like, not str; encode it"):
        new_message("hello")  # type: ignore[arg-type]


def test_str_key_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"key must be bytes-like, not str"):
        new_message(b"v", key="k")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [None, 1, 1.5, ["a"]])
def test_value_of_wrong_type(bad: object) -> None:
    with pytest.raises(TypeError, match="value must be bytes-like"):
        new_message(bad)  # type: ignore[arg-type]


def test_headers_validation() -> None:
    with pytest.raises(TypeError, match="headers must be a mapping"):
        new_message(b"v", headers=[("a", b"b")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="header names must be str"):
        new_message(b"v", headers={b"a": b"b"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"headers\['a'\] must be bytes-like, not str"):
        new_message(b"v", headers={"a": "b"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="not valid UTF-8"):
        new_message(b"v", headers={"\ud800": b"x"})


# -1 too, as for Client.publish: only None means "no check".
@pytest.mark.parametrize("bad", [-1, -2, -100, 2**63])
def test_expected_offset_out_of_range(bad: int) -> None:
    with pytest.raises(ConfigurationError, match="'expected_offset' must be between 0"):
        new_message(b"v", expected_offset=bad)


@pytest.mark.parametrize("bad", [True, 1.0, -1.0, "3"])
def test_expected_offset_wrong_type(bad: object) -> None:
    with pytest.raises(ArgumentTypeError, match="'expected_offset' must be an int"):
        new_message(b"v", expected_offset=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [1, "ALL", None])
def test_ack_policy_must_be_enum(bad: object) -> None:
    with pytest.raises(ArgumentTypeError, match="'ack_policy' must be an AckPolicy"):
        new_message(b"v", ack_policy=bad)  # type: ignore[arg-type]


def test_envelope_and_client_share_one_rule_per_mistake() -> None:
    """One validation module: the same mistake raises the same error type everywhere."""
    with pytest.raises(ConfigurationError, match="header names must not be empty"):
        new_message(b"v", headers={"": b"x"})
    with pytest.raises(ConfigurationError, match="non-empty"):
        new_message(b"v", correlation_id="")
    # Wrong types are ArgumentTypeError: a ConfigurationError and a TypeError at once.
    with pytest.raises(ConfigurationError):
        new_message(b"v", ack_policy=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        new_message(b"v", ack_policy=1)  # type: ignore[arg-type]


def test_string_field_validation() -> None:
    with pytest.raises(TypeError, match="'ack_inbox' must be a str"):
        new_message(b"v", ack_inbox=b"inbox")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'correlation_id' must be a str"):
        new_message(b"v", correlation_id=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not valid UTF-8"):
        new_message(b"v", correlation_id="\udcff")


@pytest.mark.parametrize("bad", ["bad inbox..x >", "a b", "a..b", "acks.>", "*.acks", "_INBOX.*"])
def test_ack_inbox_must_be_a_subject_to_publish_to(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="'ack_inbox'"):
        new_message(b"v", ack_inbox=bad)


def test_encode_envelope_validation() -> None:
    with pytest.raises(ConfigurationError, match="msg_type must be in 0..255"):
        encode_envelope(b"", 256, crc=False)
    with pytest.raises(ConfigurationError, match="msg_type must be in 0..255"):
        encode_envelope(b"", -1, crc=False)
    with pytest.raises(ArgumentTypeError, match="msg_type must be"):
        encode_envelope(b"", "0", crc=False)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="msg_type must be"):
        encode_envelope(b"", 1.0, crc=False)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="msg_type must be"):
        encode_envelope(b"", True, crc=False)
    with pytest.raises(TypeError, match="payload must be bytes-like"):
        encode_envelope("x", 0, crc=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("1", ArgumentTypeError),
        (None, ArgumentTypeError),
        (1.0, ArgumentTypeError),
        (True, ArgumentTypeError),  # a bool is no message type (True == 1, ACK)
        (256, ConfigurationError),
        (-1, ConfigurationError),
        (10**30, ConfigurationError),
    ],
)
def test_decode_envelope_refuses_an_expected_type_that_is_no_message_type(
    bad: object, error: type[Exception]
) -> None:
    # The caller's mistake, not the data's: an argument error, not an EnvelopeError.
    data = encode_envelope(b"", MessageType.ACK, crc=False)
    with pytest.raises(error, match="expected_type") as info:
        decode_envelope(data, bad)  # type: ignore[arg-type]
    assert not isinstance(info.value, EnvelopeError)


@pytest.mark.parametrize("bad", ["no", 1, 0, None])
def test_crc_must_be_a_bool(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="'crc' must be a bool"):
        encode_envelope(b"", MessageType.PUBLISH, crc=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'crc' must be a bool"):
        new_message(b"v", crc=bad)  # type: ignore[arg-type]


# --- properties ---------------------------------------------------------------------

_header_names = st.text(min_size=1, max_size=8)
_messages = st.fixed_dictionaries(
    {
        "value": st.binary(max_size=64),
        "key": st.none() | st.binary(min_size=1, max_size=16),
        "headers": st.none() | st.dictionaries(_header_names, st.binary(max_size=8), max_size=4),
        "ack_inbox": st.none()
        | st.from_regex(r"[A-Za-z0-9_-]{1,6}(\.[A-Za-z0-9_-]{1,6}){0,2}", fullmatch=True),
        "correlation_id": st.none() | st.text(min_size=1, max_size=16),
        "ack_policy": st.sampled_from(AckPolicy),
        "expected_offset": st.none() | st.integers(min_value=0, max_value=2**63 - 1),
        "crc": st.booleans(),
    }
)


@given(_messages)
def test_round_trip_property(kwargs: dict[str, object]) -> None:
    data = new_message(**kwargs)  # type: ignore[arg-type]
    msg = unmarshal_message(data)
    assert msg.value == kwargs["value"]
    assert msg.key == kwargs["key"]
    assert dict(msg.headers) == (kwargs["headers"] or {})
    expected = kwargs["expected_offset"]
    assert msg.offset == (-1 if expected is None else expected)
    pb = decode_message_pb(data)
    assert pb.ackInbox == (kwargs["ack_inbox"] or "")
    assert pb.correlationId == (kwargs["correlation_id"] or "")
    assert pb.ackPolicy == kwargs["ack_policy"]
    assert data[5:7] == (b"\x0c\x01" if kwargs["crc"] else b"\x08\x00")


def _decode_all(data: bytes) -> None:
    for decoder in (unmarshal_message, unmarshal_ack, decode_message_pb, decode_ack_pb):
        try:
            decoder(data)
        except EnvelopeError:
            pass
    for msg_type in (0, 1, 14, 255):
        try:
            decode_envelope(data, msg_type)
        except EnvelopeError:
            pass


@given(st.binary(max_size=64))
@example(b"")
@example(VECTOR_EMPTY)
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _decode_all(data)


@given(st.binary(max_size=48).map(lambda b: MAGIC + b))
def test_fuzz_arbitrary_bytes_after_magic(data: bytes) -> None:
    _decode_all(data)


@given(st.binary(max_size=48), st.sampled_from([0, 1]), st.booleans())
def test_fuzz_arbitrary_payload_in_valid_envelope(payload: bytes, msg_type: int, crc: bool) -> None:
    _decode_all(encode_envelope(payload, msg_type, crc=crc))


_valid_envelopes = st.sampled_from(
    [
        VECTOR_NO_CRC,
        VECTOR_CRC,
        VECTOR_EMPTY,
        new_message(b"v", key=b"k", headers={"a": b"b"}, ack_inbox="i", expected_offset=3),
        encode_envelope(
            api_pb2.Ack(stream="s", offset=1, ackError=api_pb2.Ack.TOO_LARGE).SerializeToString(),
            MessageType.ACK,
            crc=True,
        ),
    ]
)


@given(
    _valid_envelopes,
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    st.integers(min_value=0, max_value=64),
    st.binary(max_size=8),
)
def test_fuzz_mutated_envelopes(
    base: bytes, flips: list[tuple[int, int]], cut: int, tail: bytes
) -> None:
    data = bytearray(base)
    for index, value in flips:
        data[index % len(data)] = value
    _decode_all(bytes(data[: max(len(data) - cut, 0)]) + tail)
    _decode_all(bytes(data))


@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=16))
def test_fuzz_header_bytes(header_len: int, flags: int, rest: bytes) -> None:
    data = MAGIC + bytes([0, header_len, flags, 0]) + rest
    try:
        payload = decode_envelope(data, 0)
    except EnvelopeError:
        return
    # Accepted: the header checks held and the payload is what follows HeaderLen.
    assert 8 <= header_len <= len(data)
    assert payload == data[header_len:]
    if flags & 1:
        assert header_len == 12
        assert struct.unpack(">I", data[8:12])[0] == crc32c.crc32c(payload)


@pytest.mark.parametrize(
    "data",
    [
        MAGIC + b"\x00\xff\x00\x00",  # HeaderLen 255 of 8 bytes: the server slices past the end
        MAGIC + b"\x00\x09\x00\x00",
        MAGIC + b"\x00\x0d\x01\x00" + b"\x00" * 4,  # CRC flag, 12 bytes, HeaderLen 13
        MAGIC + b"\x00\xff\x00\x05" + b"x" * 200,  # any message type
    ],
)
def test_raw_payload_with_a_header_len_beyond_its_end_is_refused(data: bytes) -> None:
    with pytest.raises(ConfigurationError, match="HeaderLen"):
        check_raw_payload("payload", data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"plain",
        MAGIC + b"\x00\x08\x00\x00",  # an envelope with an empty payload
        MAGIC + b"\x00\x0c\x01\x00" + b"\x00" * 4,
        MAGIC + b"\x01\xff\x00\x00",  # another version: stored verbatim
        MAGIC + b"\x00\xff\x00",  # shorter than a header: stored verbatim
        b"\xb9\x0e\x43\xb5\x00\xff\x00\x00",
    ],
)
def test_raw_payload_the_server_survives_is_returned(data: bytes) -> None:
    assert check_raw_payload("payload", data) is data


@pytest.mark.parametrize("data", [None, "text", 5])
def test_raw_payload_that_is_no_bytes_is_an_argument_type_error(data: object) -> None:
    """``None`` raised a bare TypeError (``len(None)``)."""
    with pytest.raises(ArgumentTypeError, match="'payload' must be bytes-like"):
        check_raw_payload("payload", data)  # type: ignore[arg-type]
