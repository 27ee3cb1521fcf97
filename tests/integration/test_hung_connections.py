"""Connections that hang without closing (a TCP proxy black-holes them) are noticed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, Message, StartAt
from liftbridge_sync.testing import LiftbridgeServer, TcpProxy
from liftbridge_sync.testing._net import free_port
from tests.constants import PATIENT_RETRY
from tests.waiting import wait_until

from ._pubdata import publish_values
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.serial]


@pytest.fixture(scope="module")
def proxied() -> Iterator[tuple[TcpProxy, str]]:
    """A server that advertises a proxy's address, so that every client connection
    (including those to the partition leader, learnt from metadata) goes through it.
    Yields the proxy and the server's direct address."""
    direct = f"127.0.0.1:{free_port()}"
    with TcpProxy(direct) as tcp_proxy:
        advertised = int(tcp_proxy.address.rpartition(":")[2])
        with LiftbridgeServer(port=advertised, config={"listen": direct}):
            yield tcp_proxy, direct


def test_a_black_holed_subscription_is_noticed_and_resumes(
    proxied: tuple[TcpProxy, str], caplog: pytest.LogCaptureFixture
) -> None:
    proxy, direct = proxied
    name = unique()
    with Client(direct) as admin:
        admin.create_stream(name, name)
    publish_values(direct, name, 3)
    with Client(
        proxy.address,
        retry=PATIENT_RETRY,
        rpc_timeout=1.0,
        resubscribe_wait=60,
        keepalive_interval=0.5,
        keepalive_timeout=0.5,
    ) as client:
        assert client.fetch_metadata().brokers[0].address == proxy.address
        sub = client.subscribe(name, start=StartAt.earliest())
        assert [next(sub).offset for _ in range(3)] == [0, 1, 2]
        got: list[Message] = []
        reader = threading.Thread(target=lambda: got.extend(next(sub) for _ in range(2)))
        reader.start()  # blocked in next(): nothing more is stored yet
        caplog.set_level(logging.WARNING, logger="liftbridge_sync.subscription")
        proxy.blackhole()
        # The keepalive notices the dead connection within interval + timeout, and the
        # subscription keeps trying to resubscribe while the black hole lasts.
        blackholed = time.monotonic()
        wait_until(
            lambda: "did not answer a keepalive PING" in caplog.text,
            timeout=10,
            what="the keepalive to notice the dead connection",
        )
        assert time.monotonic() - blackholed < 5
        publish_values(direct, name, 2, start=3)  # around the proxy
        assert not got
        healed = time.monotonic()
        proxy.heal()
        reader.join(30)
        assert not reader.is_alive()
        assert [(m.offset, m.value) for m in got] == [(3, b"m3"), (4, b"m4")]
        assert time.monotonic() - healed < 15
        sub.close()


def test_publishes_into_a_black_hole_time_out_then_publishing_resumes(
    proxied: tuple[TcpProxy, str],
) -> None:
    proxy, direct = proxied
    name = unique()
    with Client(direct) as admin:
        admin.create_stream(name, name)
    with Client(proxy.address, retry=PATIENT_RETRY, rpc_timeout=1.0, ack_timeout=1.0) as client:
        first = client.publish(name, b"before")
        assert first is not None and first.offset == 0
        proxy.blackhole()
        started = time.monotonic()
        lost = [client.publish_async(name, b"lost-%d" % i) for i in range(5)]
        for future in lost:
            with pytest.raises(lb.AckTimeoutError):
                future.result(10)
        assert time.monotonic() - started < 5  # within the ack timeout, not never
        proxy.heal()
        after = client.publish(name, b"after", timeout=15)
        assert after is not None and after.offset >= 1


def test_a_stream_deleted_while_its_subscription_is_cut_off_is_reported_deleted(
    proxied: tuple[TcpProxy, str],
) -> None:
    """Another client deletes the stream while the subscriber's connection is black-holed
    (the server's NOT_FOUND never arrives): the resubscribe after the connection closes
    is refused NOT_FOUND, and the fresh metadata asked what that means lacks the stream.
    The subscriber's cache still listed it, and kept listing it once merged with that
    answer: the deletion was taken for a server recovering the partition, retried for all
    of ``resubscribe_wait`` and then raised as ``BrokerUnavailableError``."""
    proxy, direct = proxied
    name = unique()
    with Client(direct) as admin:
        admin.create_stream(name, name)
        publish_values(direct, name, 2)
        # A restarted server lists its streams again within a retry policy's max_delay:
        # an absence that lasts it is a deletion, found well before resubscribe_wait.
        retry = lb.RetryPolicy(max_delay=2.0)
        with Client(proxy.address, retry=retry, rpc_timeout=1.0, resubscribe_wait=20) as client:
            sub = client.subscribe(name, start=StartAt.earliest())
            assert [next(sub).offset for _ in range(2)] == [0, 1]
            outcome: list[object] = []
            reader = threading.Thread(target=lambda: outcome.append(_next_or_error(sub)))
            reader.start()  # blocked in next(): nothing more is stored yet
            proxy.blackhole()
            try:
                admin.delete_stream(name)  # around the proxy: the subscriber never hears
            finally:
                proxy.heal()  # closes the subscriber's connection: it resubscribes
            healed = time.monotonic()
            reader.join(30)
            assert not reader.is_alive()
            assert len(outcome) == 1 and isinstance(outcome[0], lb.StreamDeletedError), outcome
            assert time.monotonic() - healed < 15  # not only once resubscribe_wait ran out
            sub.close()


def _next_or_error(sub: lb.Subscription) -> object:
    try:
        return next(sub)
    except Exception as exc:  # the test inspects what the reader saw
        return exc
