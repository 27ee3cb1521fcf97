"""The publish connection's PINGs never earn a grpc-go ``too_many_pings`` GOAWAY.

A proxy in front of the fake broker reads every frame and scores the client's PINGs as
grpc-go's keepalive enforcement does (:class:`~liftbridge_sync.testing._pingwatch.
PingWatch`). Ack timeouts make the publisher probe the connection, and a configured
keepalive PINGs an idle one: neither may add up to more than two strikes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client
from liftbridge_sync._transport.h2.pings import PingPolicy
from liftbridge_sync.testing import FakeBroker, TcpProxy
from liftbridge_sync.testing._pingwatch import PingWatch
from tests.constants import FAST_RETRY
from tests.waiting import wait_until


def _received(broker: FakeBroker, count: int) -> bool:
    return len(broker.received) == count


@pytest.fixture
def watched() -> Iterator[tuple[FakeBroker, PingWatch, str]]:
    with FakeBroker() as broker:
        watch = PingWatch()
        proxy = TcpProxy(broker.address)
        proxy.tap = watch.tap
        with proxy:
            yield broker, watch, proxy.address


def test_ack_timeouts_in_a_row_probe_the_connection_once(
    watched: tuple[FakeBroker, PingWatch, str],
) -> None:
    # Every ack is lost, and the publishes time out one after the other: each batch of
    # timeouts asks for a probe, but without data from the broker in between only the
    # first PING may go out (the old client sent one per batch: a GOAWAY after three).
    broker, watch, address = watched
    broker.publish_script = lambda request, n: "drop"
    with Client([address], retry=FAST_RETRY, resend_after=None) as client:
        futures = []
        for i in range(6):
            futures.append(client.publish_async("s", b"%d" % i, partition=0, timeout=0.2))
            wait_until(functools.partial(_received, broker, i + 1), what="the publish")
            with pytest.raises(lb.AckTimeoutError):
                futures[-1].result(timeout=5)
        assert client.publisher_stats().connects == 1
    assert watch.pings == 1
    assert not watch.would_goaway and watch.server_goaways == 0


def test_data_from_the_broker_lets_the_next_probe_through(
    watched: tuple[FakeBroker, PingWatch, str],
) -> None:
    # Lost acks with answered publishes in between: each probe follows data, which
    # clears grpc-go's strikes, so each one may go out.
    broker, watch, address = watched
    broker.publish_script = lambda request, n: "drop" if n % 2 else "ack"
    with Client([address], retry=FAST_RETRY, resend_after=None) as client:
        for i in range(3):
            lost = client.publish_async("s", b"lost%d" % i, partition=0, timeout=0.2)
            with pytest.raises(lb.AckTimeoutError):
                lost.result(timeout=5)
            client.publish("s", b"kept%d" % i, partition=0)
    assert watch.pings == 3
    assert watch.max_strikes == 0


def test_a_configured_keepalive_pings_an_idle_connection_within_the_policy(
    watched: tuple[FakeBroker, PingWatch, str],
) -> None:
    # grpc.keepalive_time_ms of 50 ms asks for a PING after every 50 ms of silence; the
    # defaults of the ping policy (grpc's own: 5 minutes, at most two without data)
    # still rule: one PING after the broker's last data, however long the connection
    # idles. (A PING may also have gone out before the ack, if the ack took longer than
    # 50 ms on a loaded machine: the ack then lets one more through, without a strike.)
    _, watch, address = watched
    options = (("grpc.keepalive_time_ms", 50),)
    with Client([address], retry=FAST_RETRY, grpc_options=options) as client:
        client.publish("s", b"x", partition=0)
        wait_until(lambda: watch.pings >= 1, what="a keepalive PING")
        idle_until = time.monotonic() + 0.6  # a dozen keepalive periods
        wait_until(lambda: time.monotonic() >= idle_until or watch.max_strikes > 0, what="idling")
    assert 1 <= watch.pings <= 2
    assert watch.max_strikes == 0 and not watch.would_goaway


def test_a_user_may_opt_in_to_more_pings() -> None:
    # A server configured with a laxer policy: grpc's own option names loosen ours.
    policy = PingPolicy.from_grpc_options(
        {"grpc.http2.min_time_between_pings_ms": 10, "grpc.http2.max_pings_without_data": 0}
    )
    policy.pinged()
    wait_until(policy.may_ping, what="the 10 ms interval")
    policy.pinged()
    wait_until(policy.may_ping, what="the 10 ms interval")
    assert PingPolicy.from_grpc_options({}).next_allowed() == -float("inf")
    default = PingPolicy.from_grpc_options({})
    default.pinged()
    assert not default.may_ping()
    default.data_received()
    assert default.may_ping()
