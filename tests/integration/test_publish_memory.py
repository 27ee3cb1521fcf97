"""What answered publishes leave behind, against the real server.

Pipelined publishing makes several objects per message. Objects that outlive a young
garbage-collector generation make every full collection walk them, and on a busy
publisher those collections cost more than the rest of the client's work per message.
These tests pin down what stays once a publish is answered.
"""

from __future__ import annotations

import gc

import pytest

from liftbridge_sync import Client
from liftbridge_sync._wire import speedups
from tests.waiting import wait_until

from .conftest import StreamFactory

pytestmark = pytest.mark.integration

COUNT = 3000


def test_answered_publishes_leave_the_deadline_queues_at_once(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    # ack_timeout 60 s and no stall watch: the publisher thread has no reason to wake
    # up before a minute has passed.
    with Client([liftbridge_address], ack_timeout=60.0, resend_after=None) as client:
        futures = [client.publish_async(name, b"m%d" % i) for i in range(COUNT)]
        client.flush()
        assert all(f.exception() is None for f in futures)
        publisher = client._publisher
        assert publisher is not None

        def queued() -> int:
            return sum(len(q) for q in list(publisher._table.core.expiry.values()))

        # Dropped by the stream's thread right after it resolved the acks, not when
        # the publisher thread next wakes (a minute from now).
        wait_until(lambda: queued() == 0, timeout=10.0, what="empty deadline queues")


@pytest.mark.skipif(not speedups.ACTIVE, reason="C speedups not built or disabled")
def test_an_answered_publish_keeps_only_its_future_tracked(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    with Client([liftbridge_address], ack_timeout=60.0) as client:
        client.publish(name, b"warm-up")
        gc.collect()
        before = len(gc.get_objects())
        futures = [client.publish_async(name, b"m%d" % i) for i in range(COUNT)]
        client.flush()
        publisher = client._publisher
        assert publisher is not None
        wait_until(
            lambda: not any(list(publisher._table.core.expiry.values())),
            timeout=10.0,
            what="empty deadline queues",
        )
        gc.collect()
        grown = len(gc.get_objects()) - before
        acks = [f.result() for f in futures]
        assert [a.offset for a in acks if a is not None] == list(range(1, COUNT + 1))
        # The ack holds only atomic values: not tracked. The future has no dict of its own.
        assert not [a for a in acks if gc.is_tracked(a)]
        # One future per publish, plus slack for the rest of the process (threads,
        # logging, the client's own bookkeeping).
        assert grown < COUNT + 300, f"{grown} tracked objects for {COUNT} publishes"
