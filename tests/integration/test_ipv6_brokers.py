"""A server that advertises an IPv6 address (``host: "::1"``) is dialled at it.

The client must put the host in brackets (``[::1]:<port>``): ``::1:<port>`` is no
``host:port`` a resolver takes, and gRPC failed every call to the leader with
"Misformatted domain name" (retried as UNAVAILABLE until the policy gave up).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, StartAt, StopAt
from liftbridge_sync.testing import LiftbridgeServer
from liftbridge_sync.testing._net import free_port

from .conftest import unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ipv6_address() -> Iterator[str]:
    """A server listening on every address (the kit's readiness probe dials IPv4) and
    advertising ``::1``; yields its IPv6 address."""
    port = free_port()
    with LiftbridgeServer(port=port, config={"listen": f"[::]:{port}", "host": "::1"}):
        yield f"[::1]:{port}"


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_broker_advertising_ipv6_is_reached_on_every_path(
    ipv6_address: str, transport: str
) -> None:
    with Client(
        [ipv6_address], publish_transport=transport, subscribe_transport=transport
    ) as client:
        (broker,) = client.fetch_metadata().brokers
        assert broker.address == ipv6_address
        name = unique("v6")
        client.create_stream(name, name)
        assert client.fetch_partition_metadata(name, 0).leader == broker.id
        acked = client.publish(name, b"over IPv6")
        assert acked is not None
        client.set_cursor("c", name, 0, acked.offset)
        assert client.fetch_cursor("c", name, 0) == acked.offset
        with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
            assert [m.value for m in sub] == [b"over IPv6"]
