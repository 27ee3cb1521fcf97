"""Re-sending lost publishes, retrying refused ones, and a publisher thread that dies.

The fake broker scripts what a real cluster does only during a failover (publishes lost
without an answer, "failed to publish to NATS" refusals); the real-server versions of
these runs are in ``tests/integration/test_publish_failover.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client
from liftbridge_sync._publishing.resending import IDLE_PROOF
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY
from tests.waiting import wait_until

NATS_DOWN = "failed to publish to NATS: nats: outbound buffer limit exceeded"


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=1)) as server:
        yield server


@pytest.fixture(params=["grpc", "h2"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _client(fake: FakeBroker, transport: str, **options: object) -> Client:
    return Client([fake.address], retry=FAST_RETRY, publish_transport=transport, **options)  # type: ignore[arg-type]


def test_lost_publishes_are_resent_once_trouble_was_seen_and_the_leader_is_idle(
    fake: FakeBroker, transport: str
) -> None:
    # The first five requests vanish (as into a dead leader's NATS subscription), and
    # the first look for the leader finds none (as during an election).
    fake.publish_script = lambda request, n: "drop" if n <= 5 else "ack"
    fake.not_leader_times = 1
    with _client(fake, transport, resend_after=0.2) as client:
        futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(5)]
        acks = [f.result(timeout=10) for f in futures]
        stats = client.publisher_stats()
    # Re-sent once each, in their order, and then acknowledged in that order.
    assert [a.offset for a in acks] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    assert [r.value for r in fake.received] == [b"%d" % i for i in range(5)] * 2
    assert stats.resent_after_stall == 5
    assert stats.stall_probes >= 1
    assert fake.partition_metadata_calls >= 3  # the failed look, then two looks at the log


def test_every_silent_partition_is_probed_and_resent(transport: str) -> None:
    # A broker that led several partitions dies: all of them go silent at once.
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=4)) as fake:
        fake.publish_script = lambda request, n: "drop" if n <= 8 else "ack"
        fake.not_leader_times = 4  # no leader at first, for each partition's first look
        with _client(fake, transport, resend_after=0.2) as client:
            futures = [
                client.publish_async("s", b"%d-%d" % (p, i), partition=p)
                for i in range(2)
                for p in range(4)
            ]
            acks = [f.result(timeout=10) for f in futures]
            stats = client.publisher_stats()
    assert sorted((a.partition, a.offset) for a in acks) == [  # type: ignore[union-attr]
        (p, o) for p in range(4) for o in range(2)
    ]
    assert stats.resent_after_stall == 8


def _dropped_publish_is_probed_not_resent(
    fake: FakeBroker, transport: str, resend_after: float = 0.1
) -> None:
    """The broker drops the one publish: its partition is probed, nothing is re-sent,
    and the publish fails at its own timeout."""
    fake.publish_script = lambda request, n: "drop"
    with _client(fake, transport, resend_after=resend_after) as client:
        future = client.publish_async("s", b"x", partition=0, timeout=1.0)
        with pytest.raises(lb.AckTimeoutError):
            future.result(timeout=10)
        stats = client.publisher_stats()
    assert stats.stall_probes >= 1
    assert stats.resent_after_stall == 0
    assert len(fake.received) == 1


def test_a_short_silence_is_no_reason_to_resend(fake: FakeBroker, transport: str) -> None:
    # The leader answers and is idle, nothing broke, but not for long: the publish may
    # still be queued somewhere on an overloaded machine, so it is not duplicated. With
    # resend_after 0.5 s the leader would have to stay idle 1.5 s; the publish's own
    # timeout (1 s) comes first.
    _dropped_publish_is_probed_not_resent(fake, transport, resend_after=0.5)


def test_a_leader_idle_for_long_is_proof_enough_and_the_publish_is_resent(
    fake: FakeBroker, transport: str
) -> None:
    # Nothing broke where the client can see it (the stream stays up, the leader is the
    # same), but the leader stays idle and fully committed while the publish waits: it
    # was lost (a leader restarted fast and kept the lead). After IDLE_PROOF periods of
    # resend_after it is re-sent, and succeeds.
    fake.publish_script = lambda request, n: "drop" if n == 1 else "ack"
    with _client(fake, transport, resend_after=0.1) as client:
        started = time.monotonic()
        ack = client.publish_async("s", b"x", partition=0, timeout=10).result(timeout=15)
        waited = time.monotonic() - started
        stats = client.publisher_stats()
    assert ack is not None and stats.resent_after_stall == 1
    assert waited >= IDLE_PROOF * 0.1  # not before the idle leader was proof enough
    assert len(fake.received) == 2


def test_a_stream_whose_acks_are_lost_is_replaced_not_resent_on_again(
    fake: FakeBroker, transport: str
) -> None:
    # As a CI run's broker did after a NATS restart: the leader stores every publish on
    # the stream, and every copy re-sent on it, but no ack comes back. Re-sending on it
    # after each idle proof stored the same window once a second until the test timed
    # out; a second proof on the same stream retires it, and a new one gets acks.
    fake.publish_script = lambda request, n: "store" if fake.streams_opened == 1 else "ack"
    with _client(fake, transport, resend_after=0.1) as client:
        ack = client.publish_async("s", b"x", partition=0, timeout=10).result(timeout=15)
        stats = client.publisher_stats()
    assert ack is not None and ack.offset == 2  # stored by the first send and the re-send
    assert [r.value for r in fake.received] == [b"x"] * 3
    assert stats.resent_after_stall == 1
    assert stats.connects == 2 and fake.streams_opened == 2


def test_a_second_deaf_stream_in_a_row_is_replaced_too_and_the_publish_delivered(
    fake: FakeBroker, transport: str
) -> None:
    # Two streams in a row lose every ack (the second retirement, with no answer in
    # between, waits for the reconnect back-off): the third one delivers, and no copy
    # goes after the one it acknowledged.
    fake.publish_script = lambda request, n: "store" if fake.streams_opened <= 2 else "ack"
    with _client(fake, transport, resend_after=0.1) as client:
        ack = client.publish_async("s", b"x", partition=0, timeout=20).result(timeout=25)
        stats = client.publisher_stats()
    assert [r.value for r in fake.received] == [b"x"] * len(fake.received)
    assert ack is not None and ack.offset == len(fake.received) - 1
    assert stats.connects == 3 and fake.streams_opened == 3


def test_a_partition_probed_while_another_retires_the_stream_goes_again_on_the_next(
    transport: str,
) -> None:
    # On the first stream partition 0's acks are lost (stored, never answered) and
    # partition 1's publishes are lost (never stored). Partition 0's second proof
    # retires the stream; partition 1's copies went on the retired one, so its own
    # second proof re-sends on the new stream and retires nothing more.
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=2)) as fake:

        def script(request: object, n: int) -> object:
            if fake.streams_opened > 1:
                return "ack"
            return "store" if request.partition == 0 else "drop"  # type: ignore[attr-defined]

        fake.publish_script = script
        with _client(fake, transport, resend_after=0.1) as client:
            futures = [
                client.publish_async("s", b"%d" % p, partition=p, timeout=20) for p in (0, 1)
            ]
            acks = [f.result(timeout=25) for f in futures]
            stats = client.publisher_stats()
        zeros = [r for r in fake.received if r.partition == 0]
    assert acks[0] is not None and acks[0].offset == len(zeros) - 1
    assert acks[1] is not None and acks[1].offset == 0  # stored once: lost copies only
    assert stats.connects == 2 and fake.streams_opened == 2


def test_a_refused_copy_lost_later_does_not_retire_a_stream_that_answers(
    fake: FakeBroker, transport: str
) -> None:
    # The first publish is lost and re-sent after a probe, and that copy is acked: the
    # stream's acks arrive. A later publish of the same partition is refused (its
    # broker's NATS connection is down), sent again, and that copy is lost. The stream
    # answered it (the refusal): its acks are not lost, and the copy goes again on it.
    # Taking every copy sent on the stream since the probe's re-send for one the probe
    # re-sent retired a stream that answers.
    def script(request: object, n: int) -> object:
        if n in (1, 4):
            return "drop"
        if n == 3:
            return ("error", 3, NATS_DOWN)
        return "ack"

    fake.publish_script = script
    with _client(fake, transport, resend_after=0.1) as client:
        first = client.publish_async("s", b"a", partition=0, timeout=10).result(timeout=15)
        second = client.publish_async("s", b"b", partition=0, timeout=10).result(timeout=15)
        stats = client.publisher_stats()
    assert first is not None and first.offset == 0
    assert second is not None and second.offset == 1
    assert [r.value for r in fake.received] == [b"a", b"a", b"b", b"b", b"b"]
    assert stats.resent_after_stall == 2 and stats.resent_after_refusal == 1
    assert stats.connects == 1 and fake.streams_opened == 1


def test_a_publish_still_in_the_clients_own_queue_is_not_resent(fake: FakeBroker) -> None:
    # The leader is idle and committed for longer than IDLE_PROOF periods, which is
    # proof enough of a loss for a publish that was written; but this one never left
    # the client's queue (its I/O is held up, as by a combining caller that never came
    # back). Re-sent then, both copies went out once the queue moved: stored twice.
    with _client(fake, "h2", resend_after=0.1) as client:
        client.publish("s", b"warm-up")
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        io_lock = stream._io_lock  # type: ignore[union-attr]
        with io_lock:  # nobody writes, the I/O thread included, until released
            future = client.publish_async("s", b"x", partition=0, timeout=10)
            # Enough probes that an idle leader is proof of a loss several times over.
            wait_until(lambda: client.publisher_stats().stall_probes >= 6, timeout=10)
        ack = future.result(timeout=10)
        stats = client.publisher_stats()
    assert ack is not None and ack.offset == 1
    assert stats.resent_after_stall == 0
    assert [r.value for r in fake.received] == [b"warm-up", b"x"]


def test_the_queued_mark_is_written_through_once_the_requests_left(
    fake: FakeBroker, transport: str
) -> None:
    with _client(fake, transport) as client:
        client.publish("s", b"one")
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        assert stream is not None
        mark = stream.queued_mark()
        assert mark > 0
        # Nothing queued after the mark yet: a later one is not written through.
        assert not stream.written_through(mark + 1)
        client.publish("s", b"two")
        wait_until(lambda: stream.written_through(mark + 1), timeout=10)


def test_uncommitted_messages_at_the_leader_hold_the_resend_back(
    fake: FakeBroker, transport: str
) -> None:
    # The leader holds offsets it has not committed: acks may still come, so nothing is
    # re-sent and the publish fails only at its own timeout.
    fake.cluster.newest_offset, fake.cluster.high_watermark = 10, 5
    _dropped_publish_is_probed_not_resent(fake, transport)


def test_without_resend_after_a_lost_publish_times_out(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda request, n: "drop"
    with _client(fake, transport, resend_after=None) as client:
        with pytest.raises(lb.AckTimeoutError):
            client.publish("s", b"x", partition=0, timeout=0.5)
        assert client.publisher_stats().stall_probes == 0
    assert len(fake.received) == 1


def test_nats_refusals_are_sent_again_and_succeed(fake: FakeBroker, transport: str) -> None:
    # The broker's NATS connection is down for its first three requests.
    fake.publish_script = lambda request, n: ("error", 3, NATS_DOWN) if n <= 3 else "ack"
    with _client(fake, transport) as client:
        futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(3)]
        acks = [f.result(timeout=10) for f in futures]
        stats = client.publisher_stats()
    assert sorted(a.offset for a in acks) == [0, 1, 2]  # type: ignore[union-attr]
    assert stats.resent_after_refusal == 3
    assert stats.resent_after_stall == 0


def test_other_internal_errors_still_fail_the_publish(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda request, n: ("error", 3, "failed to resume stream: boom")
    with _client(fake, transport) as client:
        with pytest.raises(lb.PublishRejectedError, match="failed to resume stream"):
            client.publish("s", b"x", partition=0)
        assert client.publisher_stats().resent == 0


def test_a_dead_publisher_thread_says_so_on_the_next_call(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda request, n: "drop" if n > 1 else "ack"
    with _client(fake, transport, resend_after=None) as client:
        client.publish("s", b"first", partition=0)
        publisher = client._publisher
        assert publisher is not None
        pending = client.publish_async("s", b"pending", partition=0)
        owner = next(t for t in threading.enumerate() if t.name == "liftbridge-publisher")

        def crash(*_: object) -> None:
            raise RuntimeError("injected bug")

        publisher._loop._plan = crash  # type: ignore[method-assign]
        publisher._loop._inbox.put(object())  # wake the owner thread into the bug
        wait_until(lambda: not owner.is_alive(), timeout=10, what="publisher thread to die")

        # What was in flight fails with the same, typed, explicit error...
        with pytest.raises(lb.InternalThreadError, match="liftbridge-publisher thread died"):
            pending.result(timeout=5)
        # ... and so does every later call, instead of a silent "publisher is closed".
        for call in (
            lambda: client.publish_async("s", b"x", partition=0),
            lambda: client.publish("s", b"x", partition=0),
        ):
            with pytest.raises(lb.InternalThreadError) as caught:
                call()
            assert isinstance(caught.value.__cause__, RuntimeError)


def test_no_such_stream_from_a_broker_still_starting_is_sent_again(
    fake: FakeBroker, transport: str
) -> None:
    # A restarted broker answers "no such stream" until it has rebuilt its streams,
    # while the metadata still lists the stream: the publishes go again, nothing fails.
    fake.publish_script = lambda request, n: ("error", 2, "no such stream: s") if n <= 6 else "ack"
    with _client(fake, transport) as client:
        client.fetch_metadata()  # the client knows the stream (as a running one does)
        futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(3)]
        futures.append(client.publish_async("s", b"3", partition=0))
        acks = [f.result(timeout=10) for f in futures]
        stats = client.publisher_stats()
    assert sorted(a.offset for a in acks) == [0, 1, 2, 3]  # type: ignore[union-attr]
    assert stats.resent_after_refusal >= 4
    stored = [r.value for r in fake.received[6:]]
    assert sorted(stored) == [b"0", b"1", b"2", b"3"]  # each stored once


def test_no_such_stream_that_persists_fails_typed_after_the_retry_bound(
    fake: FakeBroker, transport: str
) -> None:
    fake.publish_script = lambda request, n: ("error", 2, "no such stream: s")
    retry = lb.RetryPolicy(max_attempts=5, max_delay=1.0, initial=0.05, maximum=0.1, jitter=0)
    with Client([fake.address], retry=retry, publish_transport=transport) as client:
        client.fetch_metadata()
        with pytest.raises(lb.NoSuchStreamError, match="no such stream"):
            client.publish("s", b"x", partition=0, timeout=10)
    assert 2 <= len(fake.received) <= 40  # sent again for about a second, then given up


def test_no_such_stream_without_metadata_fetches_it_and_is_sent_again(
    fake: FakeBroker, transport: str
) -> None:
    # A publish to an explicit partition needs no metadata: the client asks for it when
    # the refusal comes, and sends again meanwhile.
    fake.publish_script = lambda request, n: ("error", 2, "no such stream: s") if n <= 2 else "ack"
    with _client(fake, transport) as client:
        ack = client.publish("s", b"x", partition=0)
        assert client._core.metadata.snapshot is not None  # fetched on the way
    assert ack is not None and ack.offset == 0
    assert fake.metadata_calls >= 1


class _BusyLeader(FakeBroker):
    """A leader whose log keeps moving (other publishers) and is always committed."""

    def FetchPartitionMetadata(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        self.cluster.newest_offset += 10
        return super().FetchPartitionMetadata(request, context)


def test_a_full_window_lost_with_a_leader_that_moved_is_resent_though_the_log_moves(
    transport: str,
) -> None:
    # The leader moved (from b to a) while the whole window was on its way to the old
    # one; the new leader's log keeps moving with other traffic, but all of it is
    # committed: the lost window is re-sent rather than left to time out.
    cluster = FakeCluster(leader="b", partitions=1)
    with _BusyLeader("a", cluster) as broker, FakeBroker("b", cluster):
        broker.publish_script = lambda request, n: "drop" if n <= 8 else "ack"
        with Client(
            [broker.address],
            retry=FAST_RETRY,
            publish_transport=transport,
            resend_after=0.2,
            max_in_flight=8,
        ) as client:
            client.fetch_metadata()  # the client knows leader b
            cluster.leader = "a"
            futures = [
                client.publish_async("s", b"%d" % i, partition=0, timeout=8.0) for i in range(12)
            ]
            errors = [f.exception(timeout=20) for f in futures]
            stats = client.publisher_stats()
    assert errors == [None] * 12
    assert stats.resent_after_stall == 8


def test_publishes_after_the_window_emptied_are_still_watched(
    fake: FakeBroker, transport: str
) -> None:
    # Acks emptied the pending table, so the owner loop planned a long sleep (it lingers
    # for an ack timeout); the next publishes are written by their callers without
    # waking it. Their silence must still be noticed within resend_after, not at the
    # 30 s ack timeout (a leader killed just after a burst was acked lost them all).
    fake.publish_script = lambda request, n: "drop" if n == 4 else "ack"
    with _client(fake, transport, resend_after=0.2) as client:
        first = [client.publish_async("s", b"%d" % i, partition=0) for i in range(3)]
        for future in first:  # the owner loop settles these: it sees the table empty
            future.add_done_callback(lambda _: None)
        assert [f.result(timeout=10).offset for f in first] == [0, 1, 2]  # type: ignore[union-attr]
        client.flush(timeout=10)
        started = time.monotonic()
        lost = client.publish_async("s", b"lost", partition=0)
        ack = lost.result(timeout=10)
        waited = time.monotonic() - started
        stats = client.publisher_stats()
    assert ack is not None and stats.resent_after_stall == 1
    assert waited < 10
    assert [r.value for r in fake.received][-2:] == [b"lost", b"lost"]


def test_a_refused_publish_also_sent_again_meanwhile_is_stored_once(
    fake: FakeBroker, transport: str
) -> None:
    # The broker's NATS connection stays down longer than resend_after: while the
    # refused publish waits for its back-off, its partition is silent, troubled (the
    # refusal) and idle, so the stall path sends it again, and that copy is refused
    # too. Each refusal was noted for the back-off's re-send, which then sent one copy
    # per refusal: once NATS was back, the message was stored as many times.
    nats_up = threading.Event()
    stored: list[bytes] = []

    def script(request: object, n: int) -> object:
        if not nats_up.is_set():
            return ("error", 3, NATS_DOWN)
        stored.append(request.value)  # type: ignore[attr-defined]
        return "ack"

    fake.publish_script = script
    # The refusals' back-off (4 s) outlasts several silences of resend_after (0.1 s).
    retry = lb.RetryPolicy(max_attempts=20, max_delay=30.0, initial=4.0, maximum=4.0, jitter=0)
    with Client(
        [fake.address], retry=retry, publish_transport=transport, resend_after=0.1
    ) as client:
        future = client.publish_async("s", b"x", partition=0, timeout=30)
        wait_until(lambda: client.publisher_stats().resent_after_stall >= 2, timeout=10)
        # Acks may still come now (uncommitted offsets at the leader): the stall path
        # sends nothing more; a probe asked for after this one sees it.
        fake.cluster.newest_offset, fake.cluster.high_watermark = 10, 5
        probes = client.publisher_stats().stall_probes
        wait_until(lambda: client.publisher_stats().stall_probes >= probes + 2, timeout=10)
        nats_up.set()
        ack = future.result(timeout=30)
        stats = client.publisher_stats()
        sent = 1 + stats.resent_after_stall + stats.resent_after_refusal
        wait_until(lambda: len(fake.received) >= sent, timeout=10)
    assert ack is not None and ack.offset == 0
    assert stored == [b"x"]
    assert stats.resent_after_refusal == 1


def test_publishes_a_busy_leader_overtook_are_resent_without_waiting_for_their_timeout(
    fake: FakeBroker, transport: str
) -> None:
    # Seen in a rolling restart (tests/integration/test_rolling_restart.py): publishes
    # that never reached a new leader, not yet listening on the partition's NATS
    # subject, while it stored and acknowledged the ones sent after them. Its log keeps
    # moving (no idle proof) and it stays the leader, yet a later publish of the
    # partition acknowledged while the earlier ones wait proves them lost (a leader
    # answers a partition's publishes in order).
    fake.publish_script = lambda request, n: "drop" if n <= 5 else "ack"
    with _client(fake, transport, resend_after=0.2) as client:
        lost = [client.publish_async("s", b"lost%d" % i, partition=0) for i in range(5)]
        later = []
        started = time.monotonic()
        while not all(f.done() for f in lost) and time.monotonic() - started < 8:
            later.append(client.publish_async("s", b"later", partition=0))
            fake.cluster.newest_offset += 1  # the leader's log moves: it is not idle
            time.sleep(0.02)  # the pace of a steady publisher, not a synchronisation
        took = time.monotonic() - started
        acks = [f.result(timeout=1) for f in lost]
        for f in later:
            f.result(timeout=5)
        stats = client.publisher_stats()
    assert all(a is not None for a in acks)
    assert took < 3.0, took  # within a few probes, not at the ack timeout (30 s)
    assert stats.resent_after_stall == 5
    assert [r.value for r in fake.received].count(b"lost0") == 2


def test_another_streams_ack_of_a_later_publish_proves_no_loss(
    fake: FakeBroker, transport: str
) -> None:
    # Streams sharing a subject all answer a publish under its id. The partition's own
    # leader lost the first five and has not answered any since: another stream's ack
    # of a later publish says nothing of the order its own leader keeps, so it is no
    # proof that the five were lost (they might be waiting for replication).
    fake.publish_script = lambda request, n: (
        "drop" if n <= 5 else ("shared_subject", [("other", 0)], "drop")
    )
    with _client(fake, transport, resend_after=0.2) as client:
        lost = [client.publish_async("s", b"lost%d" % i, partition=0) for i in range(5)]
        started = time.monotonic()
        while client.publisher_stats().stall_probes < 6 and time.monotonic() - started < 8:
            client.publish_async("s", b"later", partition=0)
            fake.cluster.newest_offset += 1  # the leader's log moves: it is not idle
            time.sleep(0.02)  # the pace of a steady publisher, not a synchronisation
        stats = client.publisher_stats()
        assert not any(f.done() for f in lost)
        assert [r.value for r in fake.received].count(b"lost0") == 1
        client.close(timeout=0)  # the five are still pending: fail them, do not wait
    assert stats.stall_probes >= 6
    assert stats.resent_after_stall == 0
