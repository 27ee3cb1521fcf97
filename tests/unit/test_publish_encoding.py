"""Framed publish requests built from a cached prefix equal what protobuf builds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing.encoding import ack_from_proto, encode_publish, frame
from liftbridge_sync._wire.requests import build_publish_request
from liftbridge_sync.models import Ack, AckPolicy

_streams = st.from_regex(r"[a-z][a-z0-9_-]{0,30}", fullmatch=True)


@settings(deadline=None)  # no timing in tests; a loaded machine is slow
@given(
    _streams,
    st.binary(max_size=70_000),
    st.integers(0, 2**31 - 1),
    st.sampled_from(list(AckPolicy)),
    st.from_regex(r"[0-9a-f.]{1,40}", fullmatch=True),
)
def test_fast_encoding_parses_to_the_same_request(
    stream: str, value: bytes, partition: int, policy: AckPolicy, correlation_id: str
) -> None:
    framed = encode_publish(
        stream,
        value,
        partition=partition,
        key=None,
        headers=None,
        ack_policy=policy,
        expected_offset=None,
        correlation_id=correlation_id,
    )
    expected = build_publish_request(
        stream,
        value,
        partition=partition,
        key=None,
        headers=None,
        ack_policy=policy,
        expected_offset=None,
        correlation_id=correlation_id,
    )
    assert framed[0] == 0 and int.from_bytes(framed[1:5], "big") == len(framed) - 5
    assert api_pb2.PublishRequest.FromString(framed[5:]) == expected


def test_other_arguments_go_through_the_validating_builder() -> None:
    framed = encode_publish(
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
    assert frame(request.SerializeToString()) == framed
    with pytest.raises(TypeError):
        encode_publish(
            "s",
            "text",
            partition=0,
            key=None,
            headers=None,
            ack_policy=AckPolicy.LEADER,
            expected_offset=None,
            correlation_id="c",
        )


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
    assert ack_from_proto(pb, 2) == Ack.from_proto(pb, partition=2)
    assert ack_from_proto(api_pb2.Ack(), 0) == Ack.from_proto(api_pb2.Ack(), partition=0)
