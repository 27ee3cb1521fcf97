"""A retired channel (its broker left the metadata) is closed only once its calls end:
grpcio's Channel.close() would end a subscription or publish stream under way on it."""

from __future__ import annotations

import gc

import pytest

from liftbridge_sync import Client, StartAt
from tests.waiting import wait_until

from .conftest import StreamFactory

pytestmark = pytest.mark.integration


def test_grpc_streams_on_a_retired_channel_go_on_and_it_closes_after_them(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    with Client(liftbridge_address, subscribe_transport="grpc", publish_transport="grpc") as client:
        pool = client._core.pool
        client.publish(name, b"0")  # the publish stream is open on the channel
        sub = client.subscribe(name, start=StartAt.earliest())
        assert next(iter(sub)).value == b"0"
        # As if the broker had left the cluster: nothing is kept.
        assert pool.retire(()) == [liftbridge_address]
        assert pool.addresses() == (liftbridge_address,)  # both streams still on it
        client.publish(name, b"1")  # the open publish stream goes on
        assert next(iter(sub)).value == b"1"  # and so does the subscription
        assert len(pool._retired) == 2  # the subscription's channel and the publisher's
        sub.close()
        # The subscription's channel is closed once its call ended; the publisher's stays.
        wait_until(lambda: len(pool._retired) == 1, what="the subscription's channel to close")
        assert pool.addresses() == (liftbridge_address,)
        assert pool._retired[0].calls == 1  # the publish stream
        client.publish(name, b"2")  # still on the retired channel's stream


def test_a_grpc_subscription_dropped_unclosed_gives_its_retired_channel_back(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    with Client(liftbridge_address, subscribe_transport="grpc") as client:
        pool = client._core.pool
        client.publish(name, b"0")
        sub = client.subscribe(name, start=StartAt.earliest())
        assert next(iter(sub)).value == b"0"
        assert pool.retire(()) == [liftbridge_address]  # as if the broker had left
        assert len(pool._retired) == 1  # the subscription's channel, its call under way
        del sub  # never closed
        gc.collect()
        # grpcio cancels the collected call; the pool's count of it goes at its next
        # operation, and the retired channel is closed with it.
        wait_until(lambda: not pool.addresses(), what="the dropped subscription's channel to close")
        assert pool._retired == []
        with client.subscribe(name, start=StartAt.earliest()) as again:
            assert next(iter(again)).value == b"0"  # on a new channel
        assert pool.addresses() == (liftbridge_address,)
