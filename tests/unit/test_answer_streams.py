"""Which stream a framed publish went to, for telling its own answers from those of
other streams on the same subject (see ``publish_codec.answers_another_stream``)."""

from __future__ import annotations

import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.publish_codec import answers_another_stream, frame, framed_stream


@pytest.mark.parametrize(
    "request_",
    [
        api_pb2.PublishRequest(stream="orders", value=b"v", correlationId="c"),
        api_pb2.PublishRequest(key=b"k" * 300, value=b"v" * 70_000, stream="orders"),
        api_pb2.PublishRequest(stream="orders", partition=3, expectedOffset=-1),
    ],
)
def test_the_stream_is_read_wherever_protobuf_put_it(request_: api_pb2.PublishRequest) -> None:
    framed = frame(request_.SerializeToString())
    assert framed_stream(framed) == b"orders"
    assert not answers_another_stream("orders", framed)
    assert answers_another_stream("orders-2", framed)
    assert answers_another_stream("order", framed)


def test_an_answer_naming_no_stream_or_a_request_without_one_counts_as_its_own() -> None:
    framed = frame(api_pb2.PublishRequest(stream="orders").SerializeToString())
    assert not answers_another_stream("", framed)
    no_stream = frame(api_pb2.PublishRequest(value=b"v").SerializeToString())
    assert framed_stream(no_stream) is None
    assert not answers_another_stream("orders", no_stream)


@pytest.mark.parametrize("garbage", [b"", b"\x00\x00\x00\x00\x01", b"\x00" * 5 + b"\x1a\x7f"])
def test_bytes_that_do_not_parse_name_no_stream(garbage: bytes) -> None:
    assert framed_stream(garbage) is None
    assert not answers_another_stream("orders", garbage)
