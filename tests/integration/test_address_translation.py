"""``address_translator``: a server that advertises an address the client cannot reach.

As in Kubernetes or behind NAT, the server advertises ``broker-0.lb.invalid:<port>``
(``host``), while it listens on loopback (``listen``) behind a TCP proxy. With the
translator every path (unary calls to any broker and to the leader, publishing on both
transports, subscribing on both transports, consumer groups) dials the proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from liftbridge_sync import (
    BrokerUnavailableError,
    Client,
    ConfigurationError,
    RetryPolicy,
    StartAt,
    StopAt,
)
from liftbridge_sync.testing import LiftbridgeServer, TcpProxy
from liftbridge_sync.testing._net import free_port

from .conftest import unique

pytestmark = pytest.mark.integration

ADVERTISED_HOST = "broker-0.lb.invalid"


@pytest.fixture(scope="module")
def unreachable_advertised() -> Iterator[tuple[TcpProxy, str]]:
    """A server advertising ``broker-0.lb.invalid:<port>`` and a proxy in front of it.

    Yields the proxy and the advertised address.
    """
    port = free_port()
    direct = f"127.0.0.1:{port}"
    with TcpProxy(direct) as proxy:
        with LiftbridgeServer(port=port, config={"listen": direct, "host": ADVERTISED_HOST}):
            yield proxy, f"{ADVERTISED_HOST}:{port}"


def test_every_path_dials_the_translated_address(
    unreachable_advertised: tuple[TcpProxy, str],
) -> None:
    proxy, advertised = unreachable_advertised
    seen: list[str] = []

    def translate(address: str) -> str:
        seen.append(address)
        return proxy.address if address == advertised else address

    name = unique("translated")
    for transport in ("h2", "grpc"):
        with Client(
            [proxy.address],
            address_translator=translate,
            publish_transport=transport,
            subscribe_transport=transport,
        ) as client:
            meta = client.fetch_metadata()
            (broker,) = meta.brokers
            assert (broker.address, broker.advertised) == (proxy.address, advertised)
            client.create_stream(name, name, partitions=2, exist_ok=True)
            # The leader RPC, both publish calls and a subscription reach the broker.
            assert client.fetch_partition_metadata(name, 1).leader == broker.id
            acked = client.publish(name, f"{transport}-sync".encode(), partition=0)
            futures = [
                client.publish_async(name, f"{transport}-{i}".encode(), partition=1)
                for i in range(20)
            ]
            acks = [f.result(30) for f in futures]
            offsets = [a.offset for a in acks if a is not None]
            assert offsets == sorted(offsets) and len(set(offsets)) == 20
            assert acked is not None
            with client.subscribe(
                name, partition=0, start=StartAt.offset(acked.offset), stop=StopAt.latest()
            ) as sub:
                assert [m.value for m in sub] == [f"{transport}-sync".encode()]
    assert advertised in seen

    with Client([proxy.address], address_translator=translate) as client:
        with client.consumer("g", streams=[name], auto_commit=None, start=StartAt.earliest()) as c:
            got = {c.get(30).partition for _ in range(42)}
            assert got == {0, 1}


def test_without_a_translator_the_advertised_address_is_what_fails(
    unreachable_advertised: tuple[TcpProxy, str],
) -> None:
    # The control: the same server, no translator: the leader is dialled at the
    # address it advertises, which does not resolve.
    proxy, advertised = unreachable_advertised
    quick = RetryPolicy(max_attempts=2, max_delay=2.0)
    with Client([proxy.address], retry=quick, rpc_timeout=2.0) as client:
        name = unique("untranslated")
        client.create_stream(name, name)
        assert client.fetch_metadata().brokers[0].address == advertised
        with pytest.raises(BrokerUnavailableError):
            client.fetch_partition_metadata(name, 0)


def test_a_failing_translator_is_a_configuration_error_naming_the_address(
    unreachable_advertised: tuple[TcpProxy, str],
) -> None:
    proxy, advertised = unreachable_advertised

    def broken(address: str) -> str:
        return "no port here"

    with Client([proxy.address], address_translator=broken) as client:
        with pytest.raises(ConfigurationError, match=advertised):
            client.fetch_metadata()
    with pytest.raises(ConfigurationError, match="address_translator"):
        Client([proxy.address], address_translator="not callable")  # type: ignore[arg-type]


def test_an_advertised_host_name_sockets_refuse_is_left_out_and_publishes_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # "a..b" (an empty label) makes Python's socket module raise a bare UnicodeError:
    # the h2 publisher thread died of it, and every later publish raised
    # InternalThreadError; then publishes failed with a ConfigurationError about an
    # address the user never gave. The broker is now left out of the broker list (with
    # a WARNING naming it), and the publisher goes on with the seed.
    port = free_port()
    direct = f"127.0.0.1:{port}"
    with LiftbridgeServer(port=port, config={"listen": direct, "host": "a..b"}):
        quick = RetryPolicy(max_attempts=2, max_delay=2.0)
        with Client([direct], retry=quick, rpc_timeout=2.0, ack_timeout=5.0) as client:
            name = unique("badhost")
            with caplog.at_level(logging.WARNING, logger="liftbridge_sync"):
                client.create_stream(name, name)
                assert client.fetch_metadata().brokers == ()
            assert any("'a..b:" in r.getMessage() for r in caplog.records)
            for _ in range(3):
                client.publish(name, b"x")
