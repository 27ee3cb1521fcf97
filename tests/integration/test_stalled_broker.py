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

from liftbridge_sync import Client, ClientClosedError, Message, StartAt
from liftbridge_sync.testing import LiftbridgeServer
from tests.constants import PATIENT_RETRY
from tests.signals import thread_state
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


def test_close_wakes_blocked_readers_before_the_publisher_waits_for_its_acks(
    own_server: LiftbridgeServer,
) -> None:
    # ClientCore.close() closed what was registered in its weak set's order: readers
    # registered after the publisher were woken only once its close had waited out
    # its acks from the stopped broker (ack_timeout, 29.5 s here), 4 runs in 5.
    name = unique()
    with Client(own_server.address) as admin:
        admin.create_stream(name, name)
    client = Client(own_server.address, ack_timeout=20.0)
    try:
        client.publish(name, b"warm")  # the publisher registers first
        subs = [client.subscribe(name, start=StartAt.new_only()) for _ in range(3)]
        woken: list[tuple[float, str]] = []
        closed_at: list[float] = []

        def read(sub: object) -> None:
            try:
                sub.get(60)  # type: ignore[attr-defined]
            except BaseException as exc:  # noqa: BLE001 - what ended the read is the result
                woken.append((time.monotonic(), type(exc).__name__))

        readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in subs]
        for reader in readers:
            reader.start()
        own_server.pause()
        try:
            pending = client.publish_async(name, b"owed")
            wait_until(lambda: client.publisher_stats().in_flight == 1, what="in flight")
            wait_until(
                lambda: all(thread_state(t.native_id) == "S" for t in readers),
                what="readers blocked",
            )
            started = time.monotonic()

            def close() -> None:
                client.close()
                closed_at.append(time.monotonic())

            closer = threading.Thread(target=close, daemon=True)
            closer.start()
            for reader in readers:
                reader.join(10)
            assert [kind for _, kind in woken] == ["StopIteration"] * 3
            assert max(at for at, _ in woken) - started < 5.0
            assert not closed_at  # the publisher's close is still waiting for its ack
        finally:
            own_server.resume()
        closer.join(60)
        assert pending.done()
    finally:
        client.close()


def test_publishes_failed_at_close_and_never_looked_at_are_logged(
    own_server: LiftbridgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A web worker that answered 202 for publishes and exited while the broker was
    # stopped lost them with nothing above DEBUG in its log: no flush() was left to
    # report them.
    name = unique()
    with Client(own_server.address) as admin:
        admin.create_stream(name, name)
    with Client(own_server.address) as client:
        client.publish(name, b"warm")
        own_server.pause()
        try:
            for i in range(5):
                client.publish_async(name, b"lost %d" % i)  # dropped, as a handler does
            held = client.publish_async(name, b"held")
            with caplog.at_level(logging.WARNING, logger="liftbridge_sync.publisher"):
                client.close(timeout=0.5)
        finally:
            own_server.resume()
    assert isinstance(held.exception(), ClientClosedError)  # looked at: not counted
    [record] = [r for r in caplog.records if "nobody looked at" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "5 publishes failed and nobody looked at their futures: ClientClosedError"
    )
