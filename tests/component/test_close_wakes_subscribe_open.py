"""``Client.close()`` from another thread ends a ``subscribe()`` still waiting for the
broker's handshake, on either transport. With h2 the wait's only bound was a timer on
the client's scheduler, which ``close()`` stops: a silent broker held the opening for
the keepalive (30 s by default), and it then failed as unavailable, not closed."""

from __future__ import annotations

import threading
import time

import pytest

from liftbridge_sync import Client, ClientClosedError, StartAt
from liftbridge_sync.testing import FakeBroker, silent
from tests.waiting import wait_until


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_close_ends_a_subscribe_waiting_for_the_handshake(transport: str) -> None:
    with FakeBroker("a") as broker:
        broker.subscribe_scripts = [silent()]
        client = Client([broker.address], subscribe_transport=transport, rpc_timeout=30.0)
        outcome: list[BaseException | None] = []

        def subscribe() -> None:
            try:
                client.subscribe("s", start=StartAt.earliest())
                outcome.append(None)
            except BaseException as exc:  # handed to the test's thread
                outcome.append(exc)

        opener = threading.Thread(target=subscribe, name="lbtest-opener", daemon=True)
        opener.start()
        wait_until(lambda: len(broker.subscribe_requests) == 1, timeout=10)
        closed_at = time.monotonic()
        client.close()
        opener.join(10)
        assert not opener.is_alive(), "subscribe() still waits after close()"
        assert time.monotonic() - closed_at < 10
        [error] = outcome
        assert isinstance(error, ClientClosedError), error
