"""A broker that takes connections but never answers (hung, or behind a black hole)
fails no metadata call while another broker answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from liftbridge_sync import Client
from liftbridge_sync.testing import TcpProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def hung(liftbridge_address: str) -> Iterator[TcpProxy]:
    """A proxy to the server that drops everything once black-holed."""
    with TcpProxy(liftbridge_address) as proxy:
        yield proxy


def test_metadata_calls_go_on_to_the_next_broker_after_one_that_never_answers(
    liftbridge_address: str, hung: TcpProxy
) -> None:
    with Client([hung.address, liftbridge_address], rpc_timeout=1.0) as client:
        client.fetch_metadata()
        hung.blackhole()
        # Consecutive calls start on consecutive brokers: one of the two on the hung one.
        for _ in range(2):
            metadata = client.fetch_metadata()
            assert metadata.brokers
        assert hung.connections >= 1
