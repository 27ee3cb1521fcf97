"""A broker process that stops (SIGSTOP) is noticed within the configured bound.

A stopped process's kernel keeps the TCP connection up and acknowledges what fits in
its buffers, so nothing fails by itself: an idle subscription only learns of the stall
from its keepalive PING (``keepalive_interval``; the server's policy allows one per 5
minutes by default), which goes unanswered for ``keepalive_timeout``. It then
resubscribes, and reads on once the broker resumes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, Message, StartAt
from liftbridge_sync.testing import LiftbridgeServer
from tests.constants import PATIENT_RETRY
from tests.waiting import wait_until

from ._pubdata import publish_values
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.serial]


@pytest.fixture
def own_server() -> Iterator[LiftbridgeServer]:
    """A server of this test's own: stopping it must not stall anybody else's."""
    with LiftbridgeServer() as server:
        yield server


@pytest.mark.parametrize("interval", [1.0, 300.0], ids=["eager", "default-interval"])
def test_a_stopped_broker_is_noticed_by_a_subscription_within_the_bound(
    own_server: LiftbridgeServer, caplog: pytest.LogCaptureFixture, interval: float
) -> None:
    """The first PING after messages costs no strike, so it goes out after at most half
    of ``keepalive_timeout`` whatever ``keepalive_interval`` says: a broker stopped
    while a subscription reads is noticed within 1.5 times ``keepalive_timeout``."""
    name = unique()
    with Client(own_server.address) as admin:
        admin.create_stream(name, name)
    publish_values(own_server.address, name, 2)
    with Client(
        own_server.address,
        retry=PATIENT_RETRY,
        rpc_timeout=2.0,
        resubscribe_wait=120,
        keepalive_interval=interval,
        keepalive_timeout=2.0,
    ) as client:
        sub = client.subscribe(name, start=StartAt.earliest())
        assert [next(sub).offset for _ in range(2)] == [0, 1]
        got: list[Message] = []
        reader = threading.Thread(
            target=lambda: got.append(next(sub)), name="liftbridge-test-reader", daemon=True
        )
        caplog.set_level(logging.WARNING, logger="liftbridge_sync.subscription")
        own_server.pause()
        try:
            started = time.monotonic()
            # Blocked in next() from now on: its first PING after the messages goes to
            # a broker already stopped.
            reader.start()
            wait_until(lambda: "lost its stream" in caplog.text, timeout=30)
            noticed = time.monotonic() - started
        finally:
            own_server.resume()
        # min(keepalive_interval, keepalive_timeout / 2) + keepalive_timeout: 3 s, with
        # scheduling slack; never the 300 s interval.
        assert noticed < 8, noticed
        assert "keepalive PING" in caplog.text
        publish_values(own_server.address, name, 1, start=2)
        reader.join(60)
        assert not reader.is_alive()
        assert [m.offset for m in got] == [2]
        sub.close()


def test_a_stopped_broker_owing_acks_is_noticed_and_publishes_go_on_after_it_resumes(
    own_server: LiftbridgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The publish connection to a stopped broker with acks due: one PING after half of
    ``keepalive_timeout`` of silence, none answered within the other half, the
    connection ends; after SIGCONT every publish is acknowledged (re-sent as needed)."""
    name = unique()
    with Client(own_server.address) as admin:
        admin.create_stream(name, name)
    with Client(
        own_server.address,
        retry=PATIENT_RETRY,
        rpc_timeout=2.0,
        keepalive_timeout=2.0,
        ack_timeout=120,
        resend_after=None,  # only the transport may notice the stall
    ) as client:
        warm = client.publish(name, b"warm")
        assert warm is not None and warm.offset == 0
        caplog.set_level(logging.WARNING, logger="liftbridge_sync")
        # Stopped before anything is published: a broker signalled but still running
        # would answer them, and nothing would be owed.
        own_server.pause()
        try:
            started = time.monotonic()
            futures = [client.publish_async(name, b"p%d" % i) for i in range(20)]
            wait_until(lambda: "publish stream broke" in caplog.text, timeout=30)
            noticed = time.monotonic() - started
        finally:
            own_server.resume()
        # 1.25 x keepalive_timeout at worst, with slack; not the 120 s ack timeout.
        assert noticed < 6, noticed
        assert "of a PING" in caplog.text
        acks = [f.result(timeout=60) for f in futures]
        assert all(a is not None and a.offset >= 1 for a in acks)
