"""A real broker never sends a quiet ``"h2"`` subscription GOAWAY ``too_many_pings``.

grpc-go's default keepalive enforcement (the broker's) counts a strike for each PING that
comes sooner than 5 minutes after the previous one with no DATA or HEADERS from the
server in between, and ends the connection after the third. A user who asks for a PING
after 50 ms of silence still gets one, the first and after data; a stream that stays
silent is PINGed no more often than the broker allows, so it keeps its connection and
never resubscribes. A proxy's :class:`~liftbridge_sync.testing._pingwatch.PingWatch`
shows what the broker saw.
"""

from __future__ import annotations

import functools
import threading
import time

import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync.testing import TcpProxy
from liftbridge_sync.testing._pingwatch import PingWatch
from tests.waiting import wait_until

from .conftest import StreamFactory

pytestmark = pytest.mark.integration

ROUNDS = 3


def _past(moment: float) -> bool:
    return time.monotonic() >= moment


def _pinged(watch: PingWatch, times: int) -> bool:
    return watch.most_pings >= times


def test_a_quiet_subscription_with_an_eager_keepalive_keeps_its_connection(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    watch = PingWatch()
    proxy = TcpProxy(liftbridge_address)
    proxy.tap = watch.tap
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
    with (
        proxy,
        Client(
            [proxy.address], keepalive_interval=0.05, address_translator=lambda _: proxy.address
        ) as client,
    ):
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
