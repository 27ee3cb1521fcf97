"""A real broker never sends our connections GOAWAY ``too_many_pings``.

The broker is grpc-go with its default keepalive enforcement: a PING sooner than 5
minutes after the previous one, with no DATA or HEADERS from the server in between, is a
strike, and the third ends the connection. A client that asks for keepalive PINGs every
50 ms must keep its connections: the publish connection while publishing sparsely with
idle gaps, and an ``"h2"`` subscription that stays quiet between messages (it still
PINGs first and after data, but a stream that stays silent no more often than the broker
allows, so it never resubscribes). A proxy's
:class:`~liftbridge_sync.testing._pingwatch.PingWatch` shows what the broker saw.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync.testing import TcpProxy
from liftbridge_sync.testing._pingwatch import PingWatch
from tests.waiting import wait_until

from .conftest import StreamFactory

pytestmark = pytest.mark.integration

#: Quiet spells of the subscription test, each followed by a message.
ROUNDS = 3


def _past(moment: float) -> bool:
    return time.monotonic() >= moment


def _pinged(watch: PingWatch, times: int) -> bool:
    return watch.most_pings >= times


@pytest.fixture
def watched(liftbridge_address: str) -> Iterator[tuple[TcpProxy, PingWatch]]:
    """A proxy in front of the broker and grpc-go's view of the PINGs through it."""
    watch = PingWatch()
    proxy = TcpProxy(liftbridge_address)
    proxy.tap = watch.tap
    with proxy:
        yield proxy, watch


def test_sparse_publishing_with_an_eager_keepalive_keeps_its_connection(
    watched: tuple[TcpProxy, PingWatch], new_stream: StreamFactory
) -> None:
    proxy, watch = watched
    stream = new_stream()
    options = (("grpc.keepalive_time_ms", 50),)
    with Client([proxy.address], grpc_options=options) as client:
        for i in range(4):
            assert client.publish(stream, b"%d" % i) is not None
            # Idle for many keepalive periods: the client may PING, within the policy.
            wait_until(functools.partial(_past, time.monotonic() + 0.4), what="an idle gap")
        stats = client.publisher_stats()
    assert watch.pings >= 1  # the keepalive works...
    assert not watch.would_goaway  # ...within grpc-go's enforcement
    assert watch.server_goaways == 0
    assert stats.connects == 1


def test_a_quiet_subscription_with_an_eager_keepalive_keeps_its_connection(
    watched: tuple[TcpProxy, PingWatch], new_stream: StreamFactory
) -> None:
    proxy, watch = watched
    stream = new_stream()
    failures: list[BaseException] = []

    def publish_after_quiet_spells(client: Client) -> None:
        try:
            for i in range(ROUNDS):
                # The subscription PINGs once it heard nothing for 50 ms...
                wait_until(functools.partial(_pinged, watch, i + 1), timeout=10, what="a PING")
                # ...then stays quiet for many more intervals before the next message.
                wait_until(functools.partial(_past, time.monotonic() + 0.5), what="silence")
                client.publish(stream, b"%d" % i)
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    # Every connection, the subscription's too, through the proxy (one broker).
    with Client(
        [proxy.address], keepalive_interval=0.05, address_translator=lambda _: proxy.address
    ) as client:
        publisher = threading.Thread(
            target=publish_after_quiet_spells, args=(client,), name="test-publisher"
        )
        with client.subscribe(stream, start=StartAt.earliest()) as sub:
            publisher.start()
            try:
                got = [sub.get(timeout=30).value for _ in range(ROUNDS)]
            finally:
                publisher.join(60)
            resubscribes = sub.stats().resubscribes
    assert not failures
    assert got == [b"%d" % i for i in range(ROUNDS)]
    # The subscription's connection PINGed after each silence that followed data...
    assert watch.most_pings >= ROUNDS
    assert not watch.would_goaway  # ...within grpc-go's enforcement
    assert watch.server_goaways == 0
    assert resubscribes == 0


def test_a_subscription_polled_with_short_timeouts_still_pings_when_quiet(
    watched: tuple[TcpProxy, PingWatch], new_stream: StreamFactory, liftbridge_address: str
) -> None:
    # get(timeout) shorter than the keepalive interval leaves the call open: the silence
    # is measured across such reads, or no PING would ever go out while a consumer
    # polls, and a dead connection would go unnoticed.
    proxy, watch = watched
    stream = new_stream()
    # Only the subscription's connection goes through the proxy (metadata comes from
    # the seed): grpcio's own PINGs on its channels do not count.
    with Client(
        [liftbridge_address],
        keepalive_interval=0.05,
        address_translator=lambda _: proxy.address,
    ) as client:
        with client.subscribe(stream) as sub:
            # The subscription's connection is the last one through the proxy (before
            # it, the client's grpcio channel that checked the address for TLS).
            opened = len(watch.pings_by_connection())
            deadline = time.monotonic() + 10
            while watch.pings_by_connection()[-1] < 1 and time.monotonic() < deadline:
                with pytest.raises(TimeoutError):
                    sub.get(timeout=0.01)
            assert len(watch.pings_by_connection()) == opened  # no new connection
            resubscribes = sub.stats().resubscribes
    assert watch.pings_by_connection()[-1] >= 1
    assert not watch.would_goaway
    assert resubscribes == 0
