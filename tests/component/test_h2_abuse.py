"""A broker abusing HTTP/2 cannot grow the client's memory or hang its threads.

The broker is a :class:`FakeBroker` behind an :class:`H2Abuser` (which its metadata
advertises, so the publish and subscribe connections to the partition leader go
through it); the client is driven through the public API only.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync.errors import AckTimeoutError
from liftbridge_sync.testing import FakeBroker, serve
from liftbridge_sync.testing._h2abuse import H2Abuser
from tests.constants import FAST_RETRY
from tests.stacks import thread_in
from tests.waiting import wait_until

_HEADER = struct.Struct(">IBI")


@pytest.fixture
def abused() -> Iterator[tuple[FakeBroker, H2Abuser]]:
    with FakeBroker() as fake, H2Abuser(fake.address) as abuser:
        fake.advertised_port = abuser.port
        yield fake, abuser


def _client(fake: FakeBroker, **options: object) -> Client:
    """A client of ``fake`` that knows the metadata (so the leader's advertised address,
    the abuser's), as the first publish would otherwise go to the seed address."""
    client = Client(fake.address, retry=FAST_RETRY, **options)  # type: ignore[arg-type]
    client.fetch_metadata()
    return client


@pytest.mark.parametrize("kind", ["ping", "settings"])
def test_a_flood_of_answers_the_broker_does_not_read_ends_the_connection(
    abused: tuple[FakeBroker, H2Abuser], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the cap, each PING got its answer appended to an output buffer the
    broker never read: 1.4 GiB in 3 s. Now the connection ends (ENHANCE_YOUR_CALM)
    once the answers fill the room above the output cap, the publisher reconnects and
    re-sends, and the client's memory stays far below what the broker sent."""
    fake, abuser = abused
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    # The kernel's bound on unacknowledged data (keepalive_timeout, 20 s by default) ends
    # a connection whose broker reads nothing too: on a loaded machine, with the pure
    # Python reader, it came first. Raised here so that only the cap can end this one.
    # Nor may the resender: the second publish's ack waits behind the flood while the
    # leader stays idle, and a copy re-sent and proven lost again retires the stream (a
    # new one then answers before the cap is reached: pure Python, in CI).
    with _client(fake, keepalive_timeout=75.0, resend_after=None) as client:
        first = client.publish("s", b"first")
        assert first is not None and first.offset == 0  # the stream is up
        assert abuser.connections == 1
        tracemalloc.start()
        try:
            abuser.flood(kind, budget=48 << 20, seconds=60)
            pending = client.publish_async("s", b"second", timeout=90)  # behind the flood
            ack = pending.result(timeout=90)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert ack is not None and ack.offset == 1 and [r.value for r in fake.received][-1] == b"second"
    assert fake.streams_opened >= 2  # reconnected
    flooded = abuser.flooded
    assert flooded > 2 << 20  # more than the cap: the client's answers did pile up
    assert peak < 12 << 20, f"{peak} bytes traced while {flooded} were flooded"
    assert "ENHANCE_YOUR_CALM" in caplog.text and "reconnecting" in caplog.text


def test_an_oversize_frame_is_refused_from_its_header(
    abused: tuple[FakeBroker, H2Abuser], caplog: pytest.LogCaptureFixture
) -> None:
    """A subscription does not wait for 16 MiB of a frame larger than the maximum it
    announced: the header alone ends the call, and it resubscribes after the last
    offset it delivered."""
    fake, abuser = abused
    fake.subscribe_scripts = [serve([0, 1]), serve([2])]
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    with _client(fake) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert [next(sub).offset for _ in range(2)] == [0, 1]
        wait_until(lambda: abuser.connections >= 1 and len(abuser.live()) >= 1)
        abuser.send_frame(_HEADER.pack((16 << 20) - 1 << 8, 0, 1) + b"x" * 100)
        started = time.monotonic()
        assert next(sub).offset == 2
        assert time.monotonic() - started < 10
        sub.close()
    assert "16777215-byte frame (limit 16384)" in caplog.text
    assert len(fake.subscribe_starts()) == 2


def test_a_subscription_write_the_broker_does_not_take_is_bounded(
    abused: tuple[FakeBroker, H2Abuser], caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that floods PINGs and stops reading blocks the subscription's writes
    of the answers: after keepalive_timeout the call fails and resubscribes."""
    fake, abuser = abused
    fake.subscribe_scripts = [serve([0]), serve([1])]
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    with _client(fake, keepalive_timeout=1.0) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert next(sub).offset == 0
        abuser.flood("ping", budget=64 << 20, seconds=30)
        started = time.monotonic()
        assert next(sub).offset == 1
        took = time.monotonic() - started
        sub.close()
    assert took < 15, took
    assert "the broker stopped reading" in caplog.text


def test_close_from_another_thread_wakes_a_blocked_subscription_writer(
    abused: tuple[FakeBroker, H2Abuser],
) -> None:
    """With a long write bound, the iterating thread is stuck in send(): closing the
    subscription from another thread wakes it within a second (shutdown, not just
    close, which wakes nothing on Linux)."""
    fake, abuser = abused
    fake.subscribe_scripts = [serve([0])]
    with _client(fake, keepalive_timeout=120.0) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert next(sub).offset == 0
        outcome: list[object] = []

        def iterate() -> None:
            try:
                outcome.append(next(sub))
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
                outcome.append(exc)

        reader = threading.Thread(target=iterate, name="liftbridge-test-reader", daemon=True)
        abuser.flood("ping", budget=256 << 20, seconds=60)
        reader.start()
        # Blocked in the write once the flood filled the kernel buffers both ways.
        wait_until(lambda: thread_in(reader, "_send_out"), timeout=30)
        assert reader.is_alive() and not outcome
        started = time.monotonic()
        sub.close()
        reader.join(5)
        assert not reader.is_alive()
        assert time.monotonic() - started < 1.0


def test_an_oversize_frame_on_the_publish_connection_is_refused_from_its_header(
    abused: tuple[FakeBroker, H2Abuser], caplog: pytest.LogCaptureFixture
) -> None:
    """The publish connection does not wait for the 16 MiB either: the header ends it,
    the publisher reconnects and the publish waiting for its ack is re-sent."""
    fake, abuser = abused
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    with _client(fake) as client:
        first = client.publish("s", b"first")
        assert first is not None and first.offset == 0
        abuser.stall()  # the next request waits in the proxy, unanswered
        pending = client.publish_async("s", b"second", timeout=30)
        abuser.send_frame(_HEADER.pack((16 << 20) - 1 << 8, 0, 1) + b"x" * 100)
        started = time.monotonic()
        ack = pending.result(timeout=30)
        assert time.monotonic() - started < 10
    assert ack is not None and ack.offset >= 1
    assert "16777215-byte frame (limit 16384)" in caplog.text
    assert fake.streams_opened >= 2


def test_a_stalled_broker_owing_acks_is_noticed_within_the_bound(
    abused: tuple[FakeBroker, H2Abuser], caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that stops reading and answering (SIGSTOP, a hung disk) while an ack is
    due gets one PING after half of keepalive_timeout of silence; no answer within the
    other half ends the connection, and the publish is re-sent on a new one."""
    fake, abuser = abused
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    with _client(fake, keepalive_timeout=1.0, ack_timeout=60, resend_after=None) as client:
        first = client.publish("s", b"first")
        assert first is not None and first.offset == 0
        abuser.stall()
        started = time.monotonic()
        pending = client.publish_async("s", b"second")
        ack = pending.result(timeout=30)
        took = time.monotonic() - started
    assert ack is not None and ack.offset == 1
    assert took < 5, took  # the bound (1 s, 1.25 s at worst), not the 60 s ack timeout
    assert "no answer from the broker within 0.5s of a PING" in caplog.text


def test_a_flood_of_acks_for_no_publish_neither_grows_memory_nor_holds_up_close(
    abused: tuple[FakeBroker, H2Abuser],
) -> None:
    """Before the bound, one read call ran as long as every recv() came back full: a
    broker flooding acks grew an unhanded list of them by millions (2.6 GB in 3 s) and
    the loop never got to cancel() or close(). Now each turn reads about 1 MiB, hands
    the acks over (those for no pending publish are dropped at once) and looks at
    close() again."""
    fake, abuser = abused
    client = _client(fake)
    try:
        first = client.publish("s", b"first")
        assert first is not None and first.offset == 0  # the stream is up
        tracemalloc.start()
        try:
            abuser.flood("acks", budget=48 << 20, seconds=60)
            wait_until(lambda: abuser.flooded >= 16 << 20, timeout=60, what="16 MiB of acks")
            _, peak = tracemalloc.get_traced_memory()
            started = time.monotonic()
            client.close()
            took = time.monotonic() - started
        finally:
            tracemalloc.stop()
    finally:
        client.close()
    assert took < 10, f"close() took {took:.1f}s during the flood"
    assert peak < 24 << 20, f"{peak} bytes traced while {abuser.flooded} were flooded"


@pytest.mark.parametrize(
    "payload",
    [b"", b"\0", b"\0\x10ab"],  # no Origin-Len; half of one; an Origin-Len past the end
)
def test_an_altsvc_frame_the_client_does_not_use_is_ignored_however_malformed(
    abused: tuple[FakeBroker, H2Abuser], payload: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """ALTSVC (RFC 7838) is an extension frame this client does not support, so it is
    discarded (RFC 9113 §5.5, as grpc-go does). It went to h2, which parses it and took
    a short one for a connection error: the publish connection was dropped and
    replaced, and the publish waiting for its ack re-sent on a new one."""
    fake, abuser = abused
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    with _client(fake) as client:
        first = client.publish("s", b"first")
        assert first is not None and first.offset == 0
        # Ahead of the next ack on the same connection: read before it.
        abuser.send_frame(_HEADER.pack(len(payload) << 8 | 0xA, 0, 0) + payload)
        second = client.publish_async("s", b"second", timeout=30).result(timeout=30)
    assert second is not None and second.offset == 1
    assert abuser.connections == 1 and fake.streams_opened == 1, caplog.text


def test_a_broker_saying_goodbye_on_every_connection_gets_neither_a_storm_nor_a_pile(
    abused: tuple[FakeBroker, H2Abuser],
) -> None:
    """A broker answering every new connection with a graceful GOAWAY and never ending
    the call on it: each draining stream was kept (a socket and an I/O thread) until
    the broker ended it, and the next stream opened at once, so the client dialled some
    350 connections a second and kept them all (a thousand I/O threads in 3 s). Now a
    stream that goes draining before its broker answered anything is reopened after
    the reconnect back-off, and only a few streams drain at a time (the oldest is
    cancelled; what it leaves unanswered goes again as for any drain's end)."""
    fake, abuser = abused
    # Every address, the seed too, is the abuser's (the metadata connection is made
    # before the abuse starts and stays clean).
    with Client(abuser.address, retry=FAST_RETRY, ack_timeout=1.0) as client:
        client.fetch_metadata()
        abuser.goaway_new()
        pending = client.publish_async("s", b"x")
        with pytest.raises(AckTimeoutError):
            pending.result(timeout=30)  # unanswered: the draining streams never end
        io_threads = sum(t.name == "liftbridge-publish-io" for t in threading.enumerate())
        connections = abuser.connections
    # 1 s of back-off from 10 ms doubling to 50 ms: about 25 dials; without it hundreds.
    assert connections <= 60, connections
    assert io_threads <= 8, io_threads
