"""Which stream a framed publish went to, for telling its own answers from those of
other streams on the same subject (see ``publish_codec.py_answers_another_stream``).
One suite over the pure-Python function and its C twin, which the C ack settling
calls."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from liftbridge_sync import _extension
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.publish_codec import (
    frame,
    framed_stream,
    head,
    py_answers_another_stream,
    py_frame_value,
)
from liftbridge_sync.models import AckPolicy
from tests.twins import twins

Check = Callable[[str, bytes], bool]
C_CHECK: Check | None = (
    None if _extension.MODULE is None else _extension.MODULE.answers_another_stream
)

IMPLEMENTATIONS = twins(py_answers_another_stream, C_CHECK)


@pytest.fixture(params=IMPLEMENTATIONS)
def another(request: pytest.FixtureRequest) -> Check:
    check: Check = request.param
    return check


@pytest.mark.parametrize(
    "request_",
    [
        api_pb2.PublishRequest(stream="orders", value=b"v", correlationId="c"),
        api_pb2.PublishRequest(key=b"k" * 300, value=b"v" * 70_000, stream="orders"),
        api_pb2.PublishRequest(stream="orders", partition=3, expectedOffset=-1),
    ],
)
def test_the_stream_is_read_wherever_protobuf_put_it(
    request_: api_pb2.PublishRequest, another: Check
) -> None:
    framed = frame(request_.SerializeToString())
    assert framed_stream(framed) == b"orders"
    assert not another("orders", framed)
    assert another("orders-2", framed)
    assert another("order", framed)


@pytest.mark.parametrize("name", ["s", "é" * 100, "x" * 200])
def test_the_clients_own_requests_name_their_stream(name: str, another: Check) -> None:
    framed = py_frame_value(head(name, 0, AckPolicy.LEADER), b"v", b"id")
    assert framed_stream(framed) == name.encode()
    assert not another(name, framed)
    assert another(name + "x", framed)


def test_an_answer_naming_no_stream_or_a_request_without_one_counts_as_its_own(
    another: Check,
) -> None:
    framed = frame(api_pb2.PublishRequest(stream="orders").SerializeToString())
    assert not another("", framed)
    no_stream = frame(api_pb2.PublishRequest(value=b"v").SerializeToString())
    assert framed_stream(no_stream) is None
    assert not another("orders", no_stream)


def test_a_stream_no_request_can_name_is_another(another: Check) -> None:
    framed = frame(api_pb2.PublishRequest(stream="orders").SerializeToString())
    assert another("\udc80", framed)  # a lone surrogate: no UTF-8 stream name is that


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00\x00\x00\x00\x01",
        b"\x00" * 5 + b"\x1a\x7f",  # a stream longer than the bytes
        b"\x00" * 5 + b"\x02\x1a\x01s",  # field 0
        b"\x00" * 5 + b"\x09\x01\x02",  # a fixed64 cut short
        b"\x00" * 5 + b"\x0b\x1a\x01s",  # a group
        b"\x00" * 5 + b"\xff" * 11,  # a varint too long
        b"\x00" * 5 + b"\x9a\x80\x80\x80\x80\x00\x01s",  # a tag of six bytes
        b"\x00" * 5 + b"\x1a\x81\x80\x80\x80\x80\x00s",  # a length of six bytes
    ],
)
def test_bytes_that_do_not_parse_name_no_stream(garbage: bytes, another: Check) -> None:
    assert framed_stream(garbage) is None
    assert not another("orders", garbage)


def test_fixed_width_fields_before_the_stream_are_skipped(another: Check) -> None:
    framed = b"\x00" * 5 + b"\x09" + b"\x01" * 8 + b"\x15" + b"\x02" * 4 + b"\x1a\x01s"
    assert framed_stream(framed) == b"s"
    assert not another("s", framed)
    assert another("t", framed)


@pytest.mark.skipif(C_CHECK is None, reason="C speedups not built or disabled")
def test_the_c_twin_agrees_on_mangled_requests() -> None:
    assert C_CHECK is not None
    rng = random.Random(7)
    base = frame(
        api_pb2.PublishRequest(
            key=b"k", value=b"v" * 20, stream="orders", partition=2, correlationId="id"
        ).SerializeToString()
    )
    for _ in range(20_000):
        mangled = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            mangled[rng.randrange(len(mangled))] = rng.randrange(256)
        framed = bytes(mangled[: rng.randint(0, len(mangled))])
        for name in ("orders", "other", ""):
            assert C_CHECK(name, framed) == py_answers_another_stream(name, framed), framed
