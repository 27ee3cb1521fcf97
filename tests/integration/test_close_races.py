"""``close()`` racing a call in flight: the call fails with ``ClientClosedError``.

Each race is made deterministic by closing the client at the exact point the race
would land on (between a step of the call and the next), on the calling thread.
"""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_sync import Client, ClientClosedError, StartAt

from .conftest import StreamFactory

pytestmark = pytest.mark.integration


def test_a_grpc_subscribe_opened_as_the_client_closes_is_client_closed(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    client = Client(liftbridge_address, subscribe_transport="grpc")
    pool = client._session.core.pool
    stub_of = pool.stub

    def stub_then_close(address: str, **kwargs: Any) -> Any:
        stub = stub_of(address, **kwargs)
        if kwargs.get("streaming_reads"):
            client.close()  # lands between the stub's lookup and the Subscribe call
        return stub

    pool.stub = stub_then_close  # type: ignore[method-assign]
    with pytest.raises(ClientClosedError):
        client.subscribe(name, start=StartAt.earliest())
    assert client.closed
