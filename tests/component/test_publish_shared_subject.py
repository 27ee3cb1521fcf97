"""Streams that share a NATS subject all store a publish and all answer it under its
correlation id. Only the answer of the stream published to settles the publish: the
first answer used to, so a publish could return another stream's ack (a refusal of
its own stream hidden) or fail with another stream's refusal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from liftbridge_sync import Client, IncorrectOffsetError
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker

_REFUSED = api_pb2.Ack.INCORRECT_OFFSET


@pytest.fixture(params=["h2", "grpc"])
def broker_and_transport(request: pytest.FixtureRequest) -> Iterator[tuple[FakeBroker, str]]:
    broker = FakeBroker()
    broker.start()
    try:
        yield broker, request.param
    finally:
        broker.stop()


def _client(broker: FakeBroker, transport: str) -> Client:
    return Client([broker.address], publish_transport=transport, ack_timeout=10.0)


def test_another_streams_ack_does_not_settle_a_publish(
    broker_and_transport: tuple[FakeBroker, str],
) -> None:
    broker, transport = broker_and_transport
    broker.publish_script = lambda request, n: ("shared_subject", [("other", 0)])
    with _client(broker, transport) as client:
        acks: list[Any] = [client.publish("s", b"v") for _ in range(5)]
        acks += client.publish_batch("s", [b"b"] * 200)
        futures = [client.publish_async("s", b"a", key=b"k") for _ in range(50)]
        acks += [future.result(10) for future in futures]
    assert [(a.stream, a.offset) for a in acks if a is not None] == [
        ("s", offset) for offset in range(255)
    ]


def test_another_streams_refusal_does_not_fail_a_publish(
    broker_and_transport: tuple[FakeBroker, str],
) -> None:
    broker, transport = broker_and_transport
    broker.publish_script = lambda request, n: ("shared_subject", [("occ", _REFUSED)])
    with _client(broker, transport) as client:
        acks: list[Any] = [client.publish("s", b"v", expected_offset=999) for _ in range(5)]
        acks += client.publish_batch("s", [b"b"] * 100)
    assert [(a.stream, a.offset) for a in acks if a is not None] == [
        ("s", offset) for offset in range(105)
    ]


def test_a_refusal_of_the_stream_published_to_still_fails_it(
    broker_and_transport: tuple[FakeBroker, str],
) -> None:
    broker, transport = broker_and_transport

    def script(request: api_pb2.PublishRequest, n: int) -> Any:
        return ("shared_subject", [("other", 0), (request.stream, _REFUSED)])

    broker.publish_script = script
    with _client(broker, transport) as client:
        for _ in range(3):
            with pytest.raises(IncorrectOffsetError):
                client.publish("s", b"v", expected_offset=999)
