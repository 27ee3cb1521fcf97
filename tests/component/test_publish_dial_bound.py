"""A publish's timeout bounds it while its stream is still being dialled: the dial runs
on the thread that fails publishes at their deadlines, and a broker that accepted the
connection and said nothing held ``publish(timeout=1)`` for the 5 s of the handshake's
own bound (then an ``AckTimeoutError`` saying "no ack", for a message never written)."""

from __future__ import annotations

import socket
import time

import pytest

from liftbridge_sync import AckTimeoutError, Client


@pytest.mark.parametrize("call", ["publish", "publish_async"])
def test_a_publish_times_out_on_time_while_the_broker_is_silent(call: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with Client([address], rpc_timeout=15.0) as client:
            started = time.monotonic()
            with pytest.raises(AckTimeoutError, match="never written") as caught:
                if call == "publish":
                    client.publish("s", b"x", timeout=1.0)
                else:
                    client.publish_async("s", b"x", timeout=1.0).result(30)
            elapsed = time.monotonic() - started
            assert 0.9 < elapsed < 2.5, (elapsed, caught.value)
            client.close(timeout=0.5)
