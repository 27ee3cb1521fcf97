"""Big stream shapes on the real server: many messages read, many partitions, many
streams created and deleted by one long-lived client; what the client holds must stay
bounded and be released."""

from __future__ import annotations

import pytest

from liftbridge_sync import Client, StartAt, StopAt

from ._pubdata import publish_values
from .conftest import StreamFactory

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_timers_of_a_long_read_do_not_pile_up(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    # A read with a stop offset arms a silence timer (rpc_timeout) per read, and with
    # "grpc" a get(timeout) one more: each was cancelled and then held (with its call)
    # in the timer heap until its deadline, 6,000 entries for these 3,000 messages.
    name = new_stream()
    count = 3000
    publish_values(liftbridge_address, name, count)
    with Client([liftbridge_address], subscribe_transport=transport) as client:
        scheduler = client._core.scheduler()
        with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
            for _ in range(count):
                sub.get(10)
            held = len(scheduler._heap)
        assert held <= 512, f"{held} timer entries held after reading {count} messages"
