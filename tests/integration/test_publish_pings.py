"""A real broker never sends the publish connection GOAWAY ``too_many_pings``.

The broker is grpc-go with its default keepalive enforcement (more than two PINGs
sooner than 5 minutes apart with no data in between end the connection). A client that
asks for keepalive PINGs every 50 ms, publishing sparsely with idle gaps, must keep its
one connection; a proxy's :class:`~liftbridge_sync.testing._pingwatch.PingWatch` shows
what the broker saw.
"""

from __future__ import annotations

import functools
import time

import pytest

from liftbridge_sync import Client
from liftbridge_sync.testing import TcpProxy
from liftbridge_sync.testing._pingwatch import PingWatch
from tests.waiting import wait_until

from .conftest import StreamFactory

pytestmark = pytest.mark.integration


def _past(moment: float) -> bool:
    return time.monotonic() >= moment


def test_sparse_publishing_with_an_eager_keepalive_keeps_its_connection(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    watch = PingWatch()
    proxy = TcpProxy(liftbridge_address)
    proxy.tap = watch.tap
    options = (("grpc.keepalive_time_ms", 50),)
    with proxy, Client([proxy.address], grpc_options=options) as client:
        for i in range(4):
            assert client.publish(stream, b"%d" % i) is not None
            # Idle for many keepalive periods: the client may PING, within the policy.
            wait_until(functools.partial(_past, time.monotonic() + 0.4), what="an idle gap")
        stats = client.publisher_stats()
    assert watch.pings >= 1  # the keepalive works...
    assert not watch.would_goaway  # ...within grpc-go's enforcement
    assert watch.server_goaways == 0
    assert stats.connects == 1
