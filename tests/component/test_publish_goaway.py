"""A broker shutting down gracefully (GOAWAY with NO_ERROR) loses and doubles nothing.

The fake broker's :meth:`~liftbridge_sync.testing.FakeBroker.stop_gracefully` is what
grpc-go's ``GracefulStop`` does: ``GOAWAY(NO_ERROR)`` on every connection, then the
calls in flight go on until they end. The publish stream keeps taking its acks, new
publishes go to another broker at once, and nothing answered is sent twice.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator

import pytest

from liftbridge_sync import AckPolicy, Client
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY
from tests.waiting import wait_until

COUNT = 600


@pytest.fixture
def brokers() -> Iterator[tuple[FakeBroker, FakeBroker]]:
    cluster = FakeCluster(leader="a", partitions=1)
    with FakeBroker("a", cluster) as first, FakeBroker("b", cluster) as second:
        yield first, second


def test_in_flight_publishes_are_answered_by_the_draining_broker_and_never_resent(
    brokers: tuple[FakeBroker, FakeBroker],
) -> None:
    first, second = brokers
    # Slow acks keep hundreds of publishes in flight when the GOAWAY comes.
    first.publish_script = lambda request, n: ("delay", 0.002)
    with Client([first.address], retry=FAST_RETRY, publish_transport="h2") as client:
        client.fetch_metadata()  # both brokers known: the next stream goes to the other
        futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(COUNT // 2)]
        wait_until(lambda: len(first.received) >= 50, what="the first acks")
        stopped = first.stop_gracefully(grace=20)
        wait_until(lambda: client.publisher_stats().connects == 2, what="a second connection")
        futures += [
            client.publish_async("s", b"%d" % i, partition=0) for i in range(COUNT // 2, COUNT)
        ]
        errors = [f.exception(timeout=30) for f in futures]
        stats = client.publisher_stats()
        assert stopped.wait(10), "the draining broker's stream never ended"
    assert errors == [None] * COUNT
    arrivals = collections.Counter(r.value for r in first.received + second.received)
    assert set(arrivals) == {b"%d" % i for i in range(COUNT)}
    assert [v for v, n in arrivals.items() if n > 1] == []  # no duplicates
    # The draining broker answered more than it had read when it said goodbye, and the
    # publishes made after it went to the other broker.
    assert len(first.received) > 50
    assert len(second.received) >= COUNT // 2
    assert stats.connects == 2
    assert stats.resent_after_reconnect == 0


def test_what_the_draining_broker_leaves_unanswered_goes_to_the_next_one(
    brokers: tuple[FakeBroker, FakeBroker],
) -> None:
    # The broker's grace runs out before it answered everything (here: it never acks
    # after its 20th request): the rest is sent again, once, on the new connection.
    first, second = brokers
    first.publish_script = lambda request, n: "ack" if n <= 20 else "drop"
    with Client([first.address], retry=FAST_RETRY, publish_transport="h2") as client:
        client.fetch_metadata()
        futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(100)]
        wait_until(lambda: len(first.received) == 100, what="every publish to arrive")
        first.stop_gracefully(grace=0.5)
        errors = [f.exception(timeout=30) for f in futures]
        stats = client.publisher_stats()
    assert errors == [None] * 100
    assert sorted(r.value for r in second.received) == sorted(b"%d" % i for i in range(20, 100))
    assert stats.resent_after_reconnect == 80


def test_fire_and_forget_publishes_the_draining_broker_never_read_are_sent_and_resolved(
    brokers: tuple[FakeBroker, FakeBroker],
) -> None:
    # The broker stops reading (its handler blocks on the first request): the stream's
    # flow-control window fills and most publishes (AckPolicy.NONE, done once written)
    # stay queued here when the grace runs out. They go to the other broker, and each
    # resolves once written there, not with an ack timeout ("not sent") after it was.
    first, second = brokers
    first.publish_script = lambda request, n: ("delay", 3.0) if n == 1 else "ack"
    value = b"v" * (64 << 10)
    count = 1024  # 64 MiB: more than the broker and the kernel buffer, even on a loaded machine
    with Client([first.address], retry=FAST_RETRY, publish_transport="h2") as client:
        client.fetch_metadata()
        futures = [
            client.publish_async("s", value, partition=0, ack_policy=AckPolicy.NONE, timeout=5)
            for _ in range(count)
        ]
        wait_until(lambda: len(first.received) >= 1, what="the first publish to arrive")
        first.stop_gracefully(grace=0.3)
        errors = [f.exception(timeout=30) for f in futures]
        stats = client.publisher_stats()
    assert stats.resent_after_reconnect > 0  # the broker left some unread
    assert errors == [None] * count
    wait_until(lambda: len(second.received) >= stats.resent_after_reconnect)


def test_a_held_publish_sent_again_meanwhile_does_not_go_again_when_the_drain_ends(
    brokers: tuple[FakeBroker, FakeBroker],
) -> None:
    # A publish waits for the draining broker's answer; meanwhile its partition's leader
    # moved and the silence got it re-sent on the live connection. When the draining
    # stream then ended without answering it, it went to the live connection a second
    # time while the first copy was still unanswered there: stored twice.
    first, second = brokers
    first_reads, second_acks = threading.Event(), threading.Event()

    def held_by_first(request: object, n: int) -> str:
        first_reads.wait(20)  # the draining broker keeps the stream open until then
        return "drop"

    def acked_by_second(request: object, n: int) -> str:
        second_acks.wait(20)
        return "ack"

    first.publish_script = held_by_first
    second.publish_script = acked_by_second
    with Client(
        [first.address], retry=FAST_RETRY, publish_transport="h2", resend_after=0.1
    ) as client:
        client.fetch_metadata()  # the client knows leader a
        future = client.publish_async("s", b"x", partition=0, timeout=30)
        wait_until(lambda: len(first.received) == 1, what="the publish to arrive")
        first.stop_gracefully(grace=20)
        wait_until(lambda: client.publisher_stats().connects == 2, what="a second connection")
        first.cluster.leader = "b"
        wait_until(lambda: client.publisher_stats().resent_after_stall >= 1, timeout=10)
        # Uncommitted offsets at the new leader: the stall path sends nothing more (a
        # probe asked for after this one sees it).
        first.cluster.newest_offset, first.cluster.high_watermark = 10, 5
        probes = client.publisher_stats().stall_probes
        wait_until(lambda: client.publisher_stats().stall_probes >= probes + 2, timeout=10)
        publisher = client._publisher
        assert publisher is not None
        connection = publisher._loop._connection
        first_reads.set()
        wait_until(lambda: not connection.draining, what="the draining stream to end")
        second_acks.set()
        ack = future.result(timeout=30)
        stats = client.publisher_stats()
        sent = stats.resent_after_stall + stats.resent_after_reconnect
        wait_until(lambda: len(second.received) >= sent, what="every copy to arrive")
    assert ack is not None
    assert [r.value for r in second.received] == [b"x"] * stats.resent_after_stall
    assert stats.resent_after_reconnect == 0


@pytest.fixture
def small_window_brokers() -> Iterator[tuple[FakeBroker, FakeBroker]]:
    """:func:`brokers`, the first one's flow-control windows kept small (no bandwidth
    probing): grown by grpcio's probing they take tens of MiB, more on a loaded machine."""
    cluster = FakeCluster(leader="a", partitions=1)
    small = [("grpc.http2.bdp_probe", 0)]
    with (
        FakeBroker("a", cluster, server_options=small) as first,
        FakeBroker("b", cluster) as second,
    ):
        yield first, second


def test_publishes_still_queued_for_the_draining_broker_are_not_resent_meanwhile(
    small_window_brokers: tuple[FakeBroker, FakeBroker],
) -> None:
    # The draining broker stops reading (its handler blocks on the first request), so
    # most publishes are still in this client's queue for it; their partition's leader
    # moves and they go silent. Re-sent on the live connection then, they were stored
    # twice: the draining stream writes its queue once the broker reads again. (With
    # windows grown to take all 32 MiB, as on a loaded machine, nothing is left queued
    # here: what the broker took goes again as the silent publishes of an idle leader.)
    first, second = small_window_brokers
    first_reads = threading.Event()

    def blocked_then_acked(request: object, n: int) -> str:
        first_reads.wait(20)
        return "ack"

    first.publish_script = blocked_then_acked
    value = b"v" * (64 << 10)
    count = 512  # 32 MiB: more than the broker's windows
    with Client(
        [first.address], retry=FAST_RETRY, publish_transport="h2", resend_after=0.1
    ) as client:
        client.fetch_metadata()  # the client knows leader a
        futures = [
            client.publish_async("s", b"%d" % i + value, partition=0, timeout=30)
            for i in range(count)
        ]
        wait_until(lambda: len(first.received) >= 1, what="the first publish to arrive")
        first.stop_gracefully(grace=20)
        wait_until(lambda: client.publisher_stats().connects == 2, what="a second connection")
        first.cluster.leader = "b"
        # Probes enough to re-send several times over, were the silence proof of a loss.
        wait_until(
            lambda: (
                client.publisher_stats().stall_probes >= 6
                or client.publisher_stats().resent_after_stall > 0
            ),
            timeout=10,
        )
        stalled = client.publisher_stats().resent_after_stall
        first.cluster.newest_offset, first.cluster.high_watermark = 10, 5  # no more
        probes = client.publisher_stats().stall_probes
        wait_until(
            lambda: (
                client.publisher_stats().stall_probes >= probes + 2
                or all(f.done() for f in futures)
            ),
            timeout=10,
        )
        publisher = client._publisher
        assert publisher is not None
        connection = publisher._loop._connection
        first_reads.set()
        errors = [f.exception(timeout=30) for f in futures]
        # Everything the draining stream was to write arrives before the stream ends.
        wait_until(lambda: not connection.draining, what="the draining stream to end")
    assert errors == [None] * count
    arrivals = collections.Counter(r.value.rstrip(b"v") for r in first.received + second.received)
    assert sorted(v for v, n in arrivals.items() if n > 1) == []  # none stored twice
    assert stalled == 0
