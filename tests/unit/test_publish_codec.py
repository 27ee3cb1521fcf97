"""The publish codec, in both implementations (pure Python and the C speedups), against
protobuf: the framed requests it writes parse to what the validating builder builds, and
the responses protobuf serializes decode to the ``Ack`` or ``Refusal`` they say."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire import publish_codec as codec
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.requests import build_publish_request, partition_of
from liftbridge_sync._wire.status import (
    error_from_ack_error,
    error_from_async_error,
    is_transient_async_error,
)
from liftbridge_sync._wire.validate import INT32_MAX
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.models._ack import ACK_ERROR_NAMES
from liftbridge_sync.partitioners import ByKey


class Codec(NamedTuple):
    frame_value: Callable[[bytes, bytes, bytes], bytes]
    frame_id: Callable[[bytes, bytes, str, int], tuple[bytes, str]]
    frame_values: Callable[[bytes, list[object], str], tuple[list[bytes], list[str]]]
    frame_pairs: Callable[[list[bytes], list[Any], str], tuple[list[bytes], list[str], list[int]]]
    decode_ack: Callable[[bytes], Ack | None]
    decode_response: Callable[[bytes], codec.Answer]


def _implementation(name: str) -> Codec:
    if name == "python":
        return Codec(
            codec.py_frame_value,
            codec.py_frame_id,
            codec.py_frame_values,
            codec.py_frame_pairs,
            codec.py_decode_ack,
            codec.py_decode_response,
        )
    if not speedups.ACTIVE:
        pytest.skip("C speedups not built or disabled")
    from liftbridge_sync import _speedups

    return Codec(
        _speedups.frame_value,
        _speedups.frame_id,
        _speedups.frame_values,
        _speedups.frame_pairs,
        _speedups.decode_ack,
        codec.c_decode_response,
    )


both = pytest.mark.parametrize("which", ["python", "c"])


def test_the_module_uses_the_active_implementation() -> None:
    chosen = _implementation("c" if speedups.ACTIVE else "python")
    assert (
        codec.frame_value,
        codec.frame_id,
        codec.frame_values,
        codec.frame_pairs,
        codec.decode_ack,
    ) == (
        chosen.frame_value,
        chosen.frame_id,
        chosen.frame_values,
        chosen.frame_pairs,
        chosen.decode_ack,
    )
    assert codec.decode_response is chosen.decode_response


_streams = st.from_regex(r"[a-z][a-z0-9_-]{0,30}", fullmatch=True)
_ids = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=200)


def _request(stream: str, value: bytes, partition: int, policy: AckPolicy, cid: str) -> Any:
    return build_publish_request(
        stream,
        value,
        partition=partition,
        key=None,
        headers=None,
        ack_policy=policy,
        expected_offset=None,
        correlation_id=cid,
    )


def _message(framed: bytes) -> bytes:
    assert framed[0] == 0 and int.from_bytes(framed[1:5], "big") == len(framed) - 5
    return framed[5:]


@both
@settings(deadline=None)  # no timing in tests; a loaded machine is slow
@given(
    stream=_streams,
    value=st.binary(max_size=70_000),
    partition=st.integers(0, 2**31 - 1),
    policy=st.sampled_from(list(AckPolicy)),
    cid=_ids,
    n=st.integers(0, 2**63 - 1),
)
def test_framed_requests_parse_to_what_protobuf_builds(
    which: str, stream: str, value: bytes, partition: int, policy: AckPolicy, cid: str, n: int
) -> None:
    impl = _implementation(which)
    head = codec.head(stream, partition, policy)
    parse = api_pb2.PublishRequest.FromString
    framed = impl.frame_value(head, value, cid.encode())
    assert parse(_message(framed)) == _request(stream, value, partition, policy, cid)
    framed, got_id = impl.frame_id(head, value, cid, n)
    assert got_id == f"{cid}{n}"
    assert parse(_message(framed)) == _request(stream, value, partition, policy, got_id)
    values: list[object] = [value, b"", value[:3], "not bytes", b"after"]
    framed_list, ids = impl.frame_values(head, values, cid)
    assert ids == [f"{cid}.{i}" for i in range(3)]
    for i, framed in enumerate(framed_list):
        assert parse(_message(framed)) == _request(stream, values[i], partition, policy, ids[i])  # type: ignore[arg-type]


@both
@settings(deadline=None)
@given(
    stream=_streams,
    pairs=st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.binary(max_size=300)),
        max_size=8,
    ),
    partitions=st.integers(1, 9),
    policy=st.sampled_from(list(AckPolicy)),
    cid=_ids,
)
def test_a_run_of_pairs_parses_to_what_protobuf_builds_on_by_keys_partition(
    which: str,
    stream: str,
    pairs: list[tuple[bytes | None, bytes]],
    partitions: int,
    policy: AckPolicy,
    cid: str,
) -> None:
    impl = _implementation(which)
    heads = [codec.head(stream, p, policy) for p in range(partitions)]
    items: list[Any] = [*pairs, b"plain", ("text key", b"v"), b"after"]
    framed_list, ids, chosen = impl.frame_pairs(heads, items, cid)
    run = len(pairs) + 1  # the plain value is in the run; a str key ends it
    assert ids == [f"{cid}.{i}" for i in range(run)]
    for i, framed in enumerate(framed_list):
        key, value = items[i] if type(items[i]) is tuple else (None, items[i])
        assert chosen[i] == ByKey().partition(stream, key, value, partitions)
        expected = build_publish_request(
            stream,
            value,
            partition=chosen[i],
            key=key,
            headers=None,
            ack_policy=policy,
            expected_offset=None,
            correlation_id=ids[i],
        )
        assert api_pb2.PublishRequest.FromString(_message(framed)) == expected


@both
def test_a_run_of_pairs_stops_at_the_first_item_of_another_shape(which: str) -> None:
    impl = _implementation(which)
    heads = [codec.head("s", 0, AckPolicy.LEADER)]
    odd_items: list[object] = [
        (b"k", "str value"),
        (b"k",),
        (b"k", b"v", {}),
        bytearray(b"v"),
        ["k", b"v"],
    ]
    for odd in odd_items:
        framed_list, ids, chosen = impl.frame_pairs(heads, [(b"k", b"v"), odd, b"v"], "b")
        assert (ids, chosen) == (["b.0"], [0])
        assert framed_list == [codec.frame_keyed(heads[0], b"k", b"v", b"b.0")]


@settings(deadline=None)
@given(stream=_streams, value=st.binary(max_size=300), cid=_ids)
def test_encode_publish_takes_the_common_case_and_matches_the_builder(
    stream: str, value: bytes, cid: str
) -> None:
    assert codec.is_common_case(stream, value, None, None, AckPolicy.ALL, None)
    framed = codec.encode_publish(
        stream,
        value,
        partition=2,
        key=None,
        headers=None,
        ack_policy=AckPolicy.ALL,
        expected_offset=None,
        correlation_id=cid,
    )
    assert framed == codec.frame_value(codec.head(stream, 2, AckPolicy.ALL), value, cid.encode())
    expected = _request(stream, value, 2, AckPolicy.ALL, cid)
    assert api_pb2.PublishRequest.FromString(_message(framed)) == expected
    assert codec.stream_and_partition(framed) == (stream, 2)


@settings(deadline=None)
@given(
    stream=_streams,
    key=st.one_of(st.none(), st.binary(max_size=400)),
    value=st.binary(max_size=300),
    partition=st.integers(0, 2**31 - 1),
    cid=_ids,
)
def test_keyed_requests_take_the_head_and_match_the_builder(
    stream: str, key: bytes | None, value: bytes, partition: int, cid: str
) -> None:
    expected = build_publish_request(
        stream,
        value,
        partition=partition,
        key=key,
        headers=None,
        ack_policy=AckPolicy.LEADER,
        expected_offset=None,
        correlation_id=cid,
    )
    head = codec.head(stream, partition, AckPolicy.LEADER)
    keyed = codec.frame_keyed(head, key, value, cid.encode())
    assert api_pb2.PublishRequest.FromString(_message(keyed)) == expected
    if key:  # the key's field, once, right after the head
        assert keyed[5:].startswith(head + b"\x0a" + codec.varint(len(key)) + key)
    else:  # none at all, as protobuf leaves out an empty key
        assert keyed == codec.frame_value(head, value, cid.encode())
    framed = codec.encode_publish(
        stream,
        value,
        partition=partition,
        key=key,
        headers=None,
        ack_policy=AckPolicy.LEADER,
        expected_offset=None,
        correlation_id=cid,
    )
    assert framed == keyed


def test_other_arguments_go_through_the_validating_builder() -> None:
    assert not codec.is_common_case("s", bytearray(b"v"), None, None, AckPolicy.LEADER, None)
    assert not codec.is_common_case("s", b"v", b"k", None, AckPolicy.LEADER, None)
    assert not codec.is_common_case("s", b"v", None, None, AckPolicy.LEADER, 4)
    framed = codec.encode_publish(
        "s",
        bytearray(b"v"),
        partition=1,
        key=b"k",
        headers={"h": b"x"},
        ack_policy=AckPolicy.LEADER,
        expected_offset=4,
        correlation_id="c",
    )
    request = api_pb2.PublishRequest.FromString(framed[5:])
    assert (request.key, request.headers["h"], request.expectedOffset) == (b"k", b"x", 4)
    assert codec.frame(request.SerializeToString()) == framed
    with pytest.raises(TypeError):
        codec.encode_publish(
            "s",
            "text",
            partition=0,
            key=None,
            headers=None,
            ack_policy=AckPolicy.LEADER,
            expected_offset=None,
            correlation_id="c",
        )


@pytest.mark.parametrize("n", [1, 127, 128, 300, 16_383, 16_384, 2**32, 2**63, 2**64 - 1])
def test_varint_is_protobufs(n: int) -> None:
    # An Ack's offset (field 4) is an int64: protobuf writes a negative one as the
    # varint of its 64-bit two's complement.
    offset = n if n < 2**63 else n - 2**64
    assert api_pb2.Ack(offset=offset).SerializeToString() == b"\x20" + codec.varint(n)


_text = st.text(max_size=30)
_int64 = st.integers(-(2**63), 2**63 - 1)
_acks = st.builds(
    api_pb2.Ack,
    stream=_text,
    partitionSubject=_text,
    msgSubject=_text,
    offset=_int64,
    ackInbox=_text,
    correlationId=st.one_of(st.just(""), _text),
    ackPolicy=st.integers(0, 2),
    receptionTimestamp=_int64,
    commitTimestamp=_int64,
    ackError=st.sampled_from([0, 0, 0, 1, 2, 3, 4]),
)
_async_errors = st.builds(
    api_pb2.PublishAsyncError,
    code=st.integers(0, 8),
    message=st.one_of(
        _text, st.just("failed to publish to NATS: nats: connection closed"), st.just("stream")
    ),
)


@st.composite
def _responses(draw: st.DrawFn) -> api_pb2.PublishResponse:
    response = api_pb2.PublishResponse(correlationId=draw(_text))
    if draw(st.booleans()):
        response.ack.CopyFrom(draw(_acks))
    if draw(st.booleans()):
        response.asyncError.CopyFrom(draw(_async_errors))
    return response


def _expected(response: api_pb2.PublishResponse) -> tuple[object, ...]:
    """What the response says, read from protobuf's own parse of it."""
    ack = response.ack
    if not ack.correlationId and response.HasField("asyncError"):
        code, message = response.asyncError.code, response.asyncError.message
        error = error_from_async_error(code, message)
        transient = is_transient_async_error(code, message)
        return ("refusal", response.correlationId, type(error), error.args, code, transient)
    correlation_id = ack.correlationId or response.correlationId
    if ack.ackError:
        error = error_from_ack_error(ACK_ERROR_NAMES.get(ack.ackError, "UNKNOWN"))
        return ("refusal", correlation_id, type(error), error.args, None, False)
    expected = dataclasses.replace(Ack.from_proto(ack), correlation_id=correlation_id)
    return ("ack", expected)


def _seen(answer: codec.Answer) -> tuple[object, ...]:
    if isinstance(answer, codec.Refusal):
        error = answer.error
        return (
            "refusal",
            answer.correlation_id,
            type(error),
            error.args,
            answer.async_code,
            answer.transient,
        )
    assert type(answer) is Ack
    return ("ack", answer)


@both
@settings(deadline=None)
@given(response=_responses())
def test_responses_decode_to_what_protobuf_reads(
    which: str, response: api_pb2.PublishResponse
) -> None:
    impl = _implementation(which)
    data = response.SerializeToString()
    expected = _expected(api_pb2.PublishResponse.FromString(data))
    assert _seen(impl.decode_response(data)) == expected
    plain = impl.decode_ack(data)
    is_plain = (
        response.HasField("ack")
        and not response.HasField("asyncError")
        and bool(response.ack.correlationId)
        and not response.ack.ackError
    )
    # Serialized by protobuf (canonical): the common case is always taken.
    assert (plain is not None) is is_plain
    if plain is not None:
        assert ("ack", plain) == expected


@both
@settings(deadline=None)
@given(garbage=st.binary(max_size=80))
def test_garbage_decodes_like_protobuf_reads_it(which: str, garbage: bytes) -> None:
    impl = _implementation(which)
    try:
        parsed = api_pb2.PublishResponse.FromString(garbage)
    except codec.DecodeError:
        assert impl.decode_ack(garbage) is None
        with pytest.raises(codec.DecodeError):
            impl.decode_response(garbage)
        return
    assert _seen(impl.decode_response(garbage)) == _expected(parsed)
    plain = impl.decode_ack(garbage)
    if plain is not None:  # None is allowed: protobuf decides (see decode_ack)
        assert ("ack", plain) == _expected(parsed)


def test_cheap_ack_equals_the_model_constructor() -> None:
    pb = api_pb2.Ack(
        stream="s",
        partitionSubject="s",
        msgSubject="s.2",
        offset=7,
        ackInbox="i",
        correlationId="c",
        ackPolicy=1,  # type: ignore[arg-type]
        receptionTimestamp=5,
        commitTimestamp=6,
        ackError=3,  # type: ignore[arg-type]
    )
    assert codec.ack_from_proto(pb, 2) == Ack.from_proto(pb, partition=2)
    assert codec.ack_from_proto(api_pb2.Ack(), 0) == Ack.from_proto(api_pb2.Ack(), partition=0)


@both
def test_a_decoded_ack_takes_its_partition(which: str) -> None:
    impl = _implementation(which)
    data = api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="c", offset=3)).SerializeToString()
    ack = impl.decode_response(data)
    assert type(ack) is Ack and ack.partition == -1
    codec.set_ack_partition(ack, 4)
    assert ack.partition == 4 and ack.offset == 3


@both
def test_frame_functions_refuse_wrong_types(which: str) -> None:
    impl = _implementation(which)
    head = codec.head("s", 0, AckPolicy.LEADER)
    with pytest.raises(TypeError):
        impl.frame_value(head, "text", b"c")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        impl.frame_id(head, "text", "p", 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("msg_subject", "expected"),
    [
        ("foo", 0),
        ("foo.3", 3),
        ("foo.2147483647", INT32_MAX),
        ("foo.2147483648", -1),
        ("foo.²", -1),  # isdigit() but not int()
        ("foo.٣", -1),  # an Arabic-Indic digit: int() takes it, Liftbridge never sends it
        ("foo." + "9" * 5000, -1),  # past int()'s digit limit
        ("foo.", -1),
        ("foo.-1", -1),
        ("bar.1", -1),
    ],
)
def test_partition_of_a_server_sent_subject(msg_subject: str, expected: int) -> None:
    ack = api_pb2.Ack(partitionSubject="foo", msgSubject=msg_subject)
    assert partition_of(ack) == expected
