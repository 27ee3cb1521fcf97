"""Publishing against the real Liftbridge server."""

from __future__ import annotations

import array
import collections
import functools
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

import liftbridge_sync as lb
from liftbridge_sync import AckPolicy, ByKey, Client, Message, RoundRobin, StartAt, StopAt
from liftbridge_sync.testing import LiftbridgeServer
from tests.waiting import wait_until

from .conftest import StreamFactory, unique

pytestmark = pytest.mark.integration


def read_all(client: Client, stream: str, partition: int = 0) -> list[Message]:
    """Every message currently in a partition, in order."""
    if client.fetch_partition_metadata(stream, partition).newest_offset < 0:
        return []
    with client.subscribe(
        stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
    ) as sub:
        return list(sub)


def test_ack_describes_the_stored_message(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=2)
    before = time.time_ns()
    ack = liftbridge_client.publish(
        name, b"payload", key=b"key", partition=1, headers={"trace": b"abc"}, correlation_id="c-1"
    )
    assert ack is not None
    assert (ack.stream, ack.partition, ack.offset, ack.correlation_id) == (name, 1, 0, "c-1")
    assert ack.partition_subject == name and ack.message_subject == f"{name}.1"
    assert ack.ack_policy is AckPolicy.LEADER and ack.ack_error is None
    assert before <= ack.reception_timestamp_ns <= ack.commit_timestamp_ns <= time.time_ns()
    (stored,) = read_all(liftbridge_client, name, 1)
    assert (stored.offset, stored.key, stored.value, stored.partition) == (0, b"key", b"payload", 1)
    assert stored.headers["trace"] == b"abc"
    assert stored.timestamp_ns == ack.reception_timestamp_ns


def test_offsets_are_contiguous_and_order_is_kept(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream()
    futures = [liftbridge_client.publish_async(name, b"%d" % i) for i in range(500)]
    offsets = [f.result(timeout=30).offset for f in futures]  # type: ignore[union-attr]
    assert offsets == list(range(500))
    assert [m.value for m in read_all(liftbridge_client, name)] == [b"%d" % i for i in range(500)]


def test_ack_policies(liftbridge_client: Client, new_stream: StreamFactory) -> None:
    name = new_stream()
    assert liftbridge_client.publish(name, b"all", ack_policy=AckPolicy.ALL).ack_policy is (  # type: ignore[union-attr]
        AckPolicy.ALL
    )
    assert liftbridge_client.publish(name, b"none", ack_policy=AckPolicy.NONE) is None
    future = liftbridge_client.publish_async(name, b"none-async", ack_policy=AckPolicy.NONE)
    assert future.result(timeout=5) is None
    liftbridge_client.publish(name, b"leader")
    assert [m.value for m in read_all(liftbridge_client, name)] == [
        b"all",
        b"none",
        b"none-async",
        b"leader",
    ]


def test_partitioners_match_the_go_client(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=4)
    keys = [b"user-%d" % i for i in range(40)]
    acks = [liftbridge_client.publish(name, b"v", key=k, partitioner=ByKey()) for k in keys]
    assert [a.partition for a in acks] == [zlib.crc32(k) % 4 for k in keys]  # type: ignore[union-attr]
    for partition in range(4):
        stored = read_all(liftbridge_client, name, partition)
        assert [m.key for m in stored] == [k for k in keys if zlib.crc32(k) % 4 == partition]
    round_robin = RoundRobin()
    chosen = [
        liftbridge_client.publish(name, b"rr", partitioner=round_robin).partition  # type: ignore[union-attr]
        for _ in range(6)
    ]
    assert chosen == [0, 1, 2, 3, 0, 1]


def test_partitioner_waits_for_a_just_created_stream(liftbridge_client: Client) -> None:
    name = unique()
    liftbridge_client.create_stream(name, name, partitions=3)
    ack = liftbridge_client.publish(name, b"v", key=b"k", partitioner=ByKey())
    assert ack is not None and ack.partition == zlib.crc32(b"k") % 3
    liftbridge_client.delete_stream(name)


def test_a_stream_created_again_with_more_partitions_is_placed_by_the_new_count(
    liftbridge_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique()
    # A key ByKey places on partition 1 of 2, and on partition 5 of 6.
    key = next(b"k%d" % i for i in range(1000) if zlib.crc32(b"k%d" % i) % 6 == 5)
    with (
        Client([liftbridge_address], metadata_max_age=0.5) as client,
        Client([liftbridge_address]) as admin,
    ):
        admin.create_stream(name, name, partitions=2)
        first = client.publish(name, b"v", key=key, partitioner=ByKey())
        assert first is not None and first.partition == 1
        admin.delete_stream(name)
        admin.create_stream(name, name, partitions=6)

        def placed_by_six() -> bool:
            ack = client.publish(name, b"v", key=key, partitioner=ByKey())
            assert ack is not None
            return ack.partition == 5

        # Polls the publishes until the cached count is half a second old.
        wait_until(placed_by_six, 10, "a publish placed by the new partition count")
        assert "now has 6 partitions (the cached metadata said 2)" in caplog.text
        assert [m.key for m in read_all(client, name, 5)][-1:] == [key]
        admin.delete_stream(name)


def test_optimistic_concurrency(liftbridge_client: Client, new_stream: StreamFactory) -> None:
    name = new_stream(optimistic_concurrency_control=True)
    assert liftbridge_client.publish(name, b"a", expected_offset=0).offset == 0  # type: ignore[union-attr]
    assert liftbridge_client.publish(name, b"b", expected_offset=1).offset == 1  # type: ignore[union-attr]
    with pytest.raises(lb.IncorrectOffsetError):
        liftbridge_client.publish(name, b"stale", expected_offset=1)
    # No expected offset: no check (sent as -1, never the proto default 0).
    assert liftbridge_client.publish(name, b"c").offset == 2  # type: ignore[union-attr]
    with pytest.raises(lb.ConfigurationError):
        liftbridge_client.publish(name, b"x", expected_offset=3, ack_policy=AckPolicy.NONE)
    assert [m.value for m in read_all(liftbridge_client, name)] == [b"a", b"b", b"c"]


def test_streams_sharing_a_subject_each_settle_only_their_own_publishes(
    liftbridge_client: Client,
) -> None:
    """Both streams store each publish to the subject and both answer it under its id.
    A publish to the stream with optimistic concurrency returned the other stream's ack
    (16 of 20 times) though its own stream refused it and stored nothing. (v1.9.0 sends
    that refusal as an ``asyncError``, which names no stream: a refusal by the checked
    stream of a publish to the plain one would fail it too, and is not tried here.)"""
    client = liftbridge_client
    subject, checked, plain = unique(), unique(), unique()
    client.create_stream(subject, checked, optimistic_concurrency_control=True)
    client.create_stream(subject, plain)
    try:
        for _ in range(20):
            with pytest.raises(lb.IncorrectOffsetError):
                client.publish(checked, b"refused", expected_offset=999)
        assert client.fetch_partition_metadata(checked, 0).newest_offset == -1
        # Plain publishes: both streams store and ack them, each publish gets the ack of
        # the stream it went to (the plain stream stored the 20 the other refused, and
        # each stream stores the other's batch).
        acks: list[Any] = list(client.publish_batch(plain, [b"batch"] * 100))
        acks += client.publish_batch(checked, [b"both"] * 100)
        acks += [client.publish(plain, b"one") for _ in range(20)]
        expected = [(plain, offset) for offset in range(20, 120)]
        expected += [(checked, offset) for offset in range(100, 200)]
        expected += [(plain, offset) for offset in range(220, 240)]
        assert [(a.stream, a.offset) for a in acks if a is not None] == expected
    finally:
        client.delete_stream(checked)
        client.delete_stream(plain)


def test_publish_errors_are_typed(liftbridge_client: Client, new_stream: StreamFactory) -> None:
    name = new_stream(partitions=2)
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.publish(unique(), b"x")
    with pytest.raises(lb.NoSuchPartitionError):
        liftbridge_client.publish(name, b"x", partition=5)
    liftbridge_client.set_stream_readonly(name, partitions=[1])
    with pytest.raises(lb.ReadonlyPartitionError):
        liftbridge_client.publish(name, b"x", partition=1)
    with pytest.raises(lb.PublishRejectedError) as too_large:
        liftbridge_client.publish(name, b"x" * (1024 * 1024 + 1))
    # Above NATS' 1 MB max_payload the server cannot even forward it: INTERNAL.
    assert too_large.value.code == "INTERNAL"
    assert "maximum payload" in too_large.value.details
    with pytest.raises(TypeError, match="encode"):
        liftbridge_client.publish(name, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        liftbridge_client.publish(name, b"x", key="text")  # type: ignore[arg-type]
    with pytest.raises(lb.ConfigurationError):
        liftbridge_client.publish(name, b"x", partition=0, partitioner=ByKey())
    with pytest.raises(lb.ConfigurationError):
        liftbridge_client.publish(name, b"x", timeout=0)
    # Nothing above reached partition 0 except what the server refused.
    assert read_all(liftbridge_client, name, 0) == []


def test_flush_raises_for_failures_nobody_looked_at(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """The README's sink pattern (publish_async per row, then flush) cannot lose rows quietly."""
    name = new_stream()
    liftbridge_client.set_stream_readonly(name)
    for i in range(2000):
        liftbridge_client.publish_async(name, b"row %d" % i)
    with pytest.raises(lb.UnobservedPublishFailuresError) as raised:
        liftbridge_client.flush(30)
    assert raised.value.count == 2000
    assert 1 <= len(raised.value.errors) <= 10
    assert all(isinstance(e, lb.ReadonlyPartitionError) for e in raised.value.errors)
    liftbridge_client.flush(30)  # reported once, then forgotten

    # Failures the caller looked at (result/exception, or publish() raising) are not reported.
    seen = [liftbridge_client.publish_async(name, b"seen") for _ in range(5)]
    assert all(isinstance(f.exception(timeout=30), lb.ReadonlyPartitionError) for f in seen)
    with pytest.raises(lb.ReadonlyPartitionError):
        liftbridge_client.publish(name, b"sync")
    liftbridge_client.flush(30)

    # A mix: only the unobserved one is counted.
    looked_at = liftbridge_client.publish_async(name, b"a")
    liftbridge_client.publish_async(name, b"b")
    with pytest.raises(lb.ReadonlyPartitionError):
        looked_at.result(timeout=30)
    with pytest.raises(lb.UnobservedPublishFailuresError) as raised:
        liftbridge_client.flush(30)
    assert raised.value.count == 1


def test_messages_above_the_server_limit_are_refused_before_the_wire(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """Over 4 MiB the server would end the whole stream; neighbours must not fail."""
    name = new_stream()
    neighbours = [liftbridge_client.publish_async(name, b"n%d" % i) for i in range(20)]
    for too_big in (
        {"value": b"x" * (4 * 1024 * 1024)},
        {"value": b"x", "key": b"k" * (8 * 1024 * 1024)},
        {"value": b"x", "headers": {"h": b"v" * (5 * 1024 * 1024)}},
        {"value": b"x" * (65 * 1024 * 1024)},
    ):
        with pytest.raises(lb.MessageTooLargeError, match="at most 4,194,304"):
            liftbridge_client.publish_async(name, **too_big)  # type: ignore[arg-type]
    with pytest.raises(lb.MessageTooLargeError):
        liftbridge_client.publish_to_subject(name, b"x" * (4 * 1024 * 1024))
    assert [f.result(10).offset for f in neighbours] == list(range(20))  # type: ignore[union-attr]
    liftbridge_client.flush(10)


def test_leader_refuses_messages_above_the_replication_limit() -> None:
    """A TOO_LARGE ack from the leader fails the publish (BAD_REQUEST async error)."""
    limited = {"clustering": {"replication.max.bytes": 4096}}
    with LiftbridgeServer(config=limited) as server, Client(server.address) as client:
        name = unique()
        client.create_stream(name, name)
        with pytest.raises(lb.PublishRejectedError) as info:
            client.publish(name, b"x" * 8192)
        assert info.value.code == "BAD_REQUEST"
        assert "max replication size" in info.value.details
        with pytest.raises(lb.PublishRejectedError) as direct:
            client.publish_to_subject(name, b"y" * 8192)
        assert direct.value.code == "TOO_LARGE"
        assert client.publish(name, b"small").offset == 0  # type: ignore[union-attr]


def test_the_seed_servers_bootstrap_subject_is_never_sent_to() -> None:
    """Any message on ``<namespace>.raft.metadata.bootstrap`` (or its ``.reply``) made a
    server started as the bootstrap seed (as the harness starts one) exit: a
    ``publish_to_subject`` there, or a publish to a stream created on that subject."""
    with LiftbridgeServer() as server, Client(server.address) as client:
        subjects = [
            f"{server.namespace}.raft.metadata.bootstrap",
            f"{server.namespace}.raft.metadata.bootstrap.reply",
        ]
        for subject in subjects:
            with pytest.raises(lb.ConfigurationError, match="raft.metadata.bootstrap"):
                client.publish_to_subject(subject, b"x", ack_policy=AckPolicy.NONE)
            with pytest.raises(lb.ConfigurationError, match="raft.metadata.bootstrap"):
                client.create_stream(subject, unique())
        name = unique()
        client.create_stream(name, name)  # the server still answers, and stores
        assert client.publish(name, b"after").offset == 0  # type: ignore[union-attr]
        assert server.running


def test_encrypted_stream_round_trip() -> None:
    key = {"LIFTBRIDGE_ENCRYPTION_KEY": "t7w!z%C*F-JaNcRf"}
    with LiftbridgeServer(env=key) as server, Client(server.address) as client:
        name = unique()
        client.create_stream(name, name, encryption=True)
        client.publish(name, b"secret", headers={"h": b"1"})
        (stored,) = read_all(client, name)
        assert (stored.value, stored.headers["h"]) == (b"secret", b"1")


def test_publish_to_subject_keeps_headers(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=2)
    ack = liftbridge_client.publish_to_subject(
        f"{name}.1", b"direct", key=b"k", headers={"origin": b"subject"}, correlation_id="x"
    )
    assert ack is not None and (ack.stream, ack.partition, ack.offset) == (name, 1, 0)
    assert ack.correlation_id == "x"
    (stored,) = read_all(liftbridge_client, name, 1)
    assert (stored.value, stored.key, stored.headers["origin"]) == (b"direct", b"k", b"subject")
    assert liftbridge_client.publish_to_subject(name, b"n", ack_policy=AckPolicy.NONE) is None
    with pytest.raises(lb.AckTimeoutError):
        liftbridge_client.publish_to_subject(f"{unique()}.nobody", b"x", timeout=0.5)


def test_threads_publishing_plain_values_keep_each_threads_order(
    liftbridge_address: str, new_stream: StreamFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plain values to a partition take publish_async's C fast path, which enters a
    # publish without taking the send lock (it sees it free while holding the GIL);
    # some threads also call publish(), which writes on its own thread under the locks.
    from liftbridge_sync._publishing import publisher as publisher_module

    fast = publisher_module._submit_plain
    entered_fast = [0]
    if fast is not None:  # count the publishes the fast path entered itself

        def counting(*args: object) -> object:
            result = fast(*args)
            if isinstance(result, (Future, tuple)):
                entered_fast[0] += 1
            return result

        monkeypatch.setattr(publisher_module, "_submit_plain", counting)
    name = new_stream(partitions=4)
    client = Client(liftbridge_address, max_in_flight=2048, ack_timeout=60)
    per_thread, threads = 1000, 24

    def produce(worker: int) -> list[Future[lb.Ack | None]]:
        futures: list[Future[lb.Ack | None]] = []
        for i in range(per_thread):
            value = b"%d:%d" % (worker, i)
            if worker % 6 == 0 and i % 50 == 0:
                done: Future[lb.Ack | None] = Future()
                done.set_result(client.publish(name, value, partition=worker % 4))
                futures.append(done)
            else:
                futures.append(client.publish_async(name, value, partition=worker % 4))
        return futures

    with ThreadPoolExecutor(max_workers=threads) as pool:
        batches = list(pool.map(produce, range(threads)))
    client.flush(timeout=120)
    acks = [f.result(timeout=0) for batch in batches for f in batch]
    assert len(acks) == per_thread * threads and all(a is not None for a in acks)
    for partition in range(4):
        stored = read_all(client, name, partition)
        offsets = sorted(a.offset for a in acks if a.partition == partition)  # type: ignore[union-attr]
        assert offsets == list(range(len(stored))) == [m.offset for m in stored]
        seen: dict[bytes, int] = {}
        for message in stored:
            worker, index = message.value.split(b":")
            assert int(worker) % 4 == partition
            assert int(index) == seen.get(worker, -1) + 1, "a thread's order was not kept"
            seen[worker] = int(index)
        assert all(count == per_thread - 1 for count in seen.values())
    client.close()
    assert fast is None or entered_fast[0] > per_thread * threads // 2


def test_fifty_threads_thousand_keyed_publishes_each(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=4)
    baseline = {t.name for t in threading.enumerate()}
    # Correctness under load, not speed: a loaded CI machine must not turn into timeouts.
    client = Client(liftbridge_address, max_in_flight=4096, ack_timeout=60)
    per_thread, threads = 1000, 50

    def produce(worker: int) -> list[Future[lb.Ack | None]]:
        return [
            client.publish_async(
                name, b"%d:%d" % (worker, i), key=b"w%d" % worker, partitioner=ByKey()
            )
            for i in range(per_thread)
        ]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        batches = list(pool.map(produce, range(threads)))
    client.flush(timeout=120)
    acks = [f.result(timeout=0) for batch in batches for f in batch]
    assert len(acks) == per_thread * threads and all(a is not None for a in acks)
    by_partition: dict[int, list[int]] = collections.defaultdict(list)
    for ack in acks:
        by_partition[ack.partition].append(ack.offset)  # type: ignore[union-attr]
    for partition, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"gap/dup in {partition}"
        newest = client.fetch_partition_metadata(name, partition).newest_offset
        assert newest == len(offsets) - 1
        stored = read_all(client, name, partition)
        assert len(stored) == len(offsets)
        # Per key (one key per thread), the order of publishing is kept.
        seen: dict[bytes, int] = {}
        for message in stored:
            worker, index = message.value.split(b":")
            assert int(index) == seen.get(worker, -1) + 1
            seen[worker] = int(index)
    client.close()
    assert {t.name for t in threading.enumerate() if t.name.startswith("liftbridge-")} <= {
        n for n in baseline if n.startswith("liftbridge-")
    }


@pytest.mark.parametrize("transport", ["grpc", "h2"])
def test_server_restart_during_pipelined_publishing(transport: str) -> None:
    """No future hangs across a restart, and every acked message is in the stream."""
    with (
        LiftbridgeServer() as server,
        Client(
            server.address, ack_timeout=8.0, max_in_flight=256, publish_transport=transport
        ) as client,
    ):
        name = unique()
        client.create_stream(name, name)
        futures: list[Future[lb.Ack | None]] = []
        restarted = threading.Event()

        def produce() -> None:
            for i in range(3000):
                futures.append(client.publish_async(name, b"%d" % i))
                if i == 1000:
                    server.restart()
                    restarted.set()

        producer = threading.Thread(target=produce)
        producer.start()
        producer.join(timeout=120)
        assert not producer.is_alive() and restarted.is_set()
        acked: dict[int, bytes] = {}
        failures = 0
        deadline = time.monotonic() + 60
        for i, future in enumerate(futures):
            try:
                ack = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except lb.LiftbridgeError:
                failures += 1
                continue
            assert ack is not None
            acked[ack.offset] = b"%d" % i
        assert all(f.done() for f in futures)
        assert len(acked) > 1000  # most publishes survive the restart
        # Publish once more: a write moves the high watermark past anything the restart
        # left uncheckpointed, so every acked message is readable.
        client.publish(name, b"final")
        try:
            with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
                stored = {m.offset: m.value for m in sub}
                backwards = sub.stats().out_of_order
        except lb.BrokerUnavailableError:
            # Seen once (3.13, 2026-11-29): the restarted server closed the read after
            # offset 771 and refused connections from then on. Say whether it died.
            pytest.fail(
                "the server stopped answering after its restart: "
                f"{server.crash_reason() or server.log_tail(20)}"
            )
        wrong = {o: (v, stored.get(o)) for o, v in acked.items() if stored.get(o) != v}
        if wrong and backwards:
            # The restarted v1.9.0 appended at offsets its log already held (its reader
            # went back: offset 867, then 764), and acked our publishes with them: two
            # messages at one offset is the server's log, not the client's doing.
            pytest.xfail(
                f"v1.9.0 reused offsets after its restart: its log went back {backwards} "
                f"time(s); acked (value, stored) at those offsets: {sorted(wrong.items())[:5]}"
            )
        assert not wrong, f"acked messages missing, (acked, stored): {sorted(wrong.items())[:5]}"


def test_a_lone_server_restarting_is_no_missing_stream() -> None:
    """A lone broker rebuilding its streams after a restart refuses publishes as "no such
    stream", and answers the metadata request without the stream as well: a client that
    had never fetched the stream's metadata failed dozens of publishes per restart with
    NoSuchStreamError (a client that had, a few), for a stream that was there all along.
    Right after its publish stream broke, the client sends them again instead."""
    with LiftbridgeServer() as server:
        name = unique()
        with Client(server.address) as admin:
            admin.create_stream(name, name)
        with Client(server.address) as client:  # never asks for the stream's metadata
            client.publish(name, b"before")
            stop = threading.Event()
            outcomes: list[BaseException | None] = []

            def publish_on() -> None:
                sent = 0
                while not stop.is_set() or sent < 20:
                    try:
                        client.publish(name, b"%d" % sent)
                        outcomes.append(None)
                    except lb.LiftbridgeError as exc:
                        outcomes.append(exc)
                    sent += 1

            publisher = threading.Thread(target=publish_on, name="lbtest-publisher")
            publisher.start()
            try:
                wait_until(lambda: len(outcomes) >= 20, 30, "publishes before the restart")
                server.restart(kill=True)
                restarted_at = len(outcomes)
                wait_until(
                    lambda: outcomes[restarted_at:].count(None) >= 20, 60, "publishes after it"
                )
            finally:
                stop.set()
                publisher.join(60)
            missing = [e for e in outcomes if isinstance(e, lb.NoSuchStreamError)]
            assert not missing, f"{len(missing)} of {len(outcomes)}: {missing[0]}"


def test_every_buffer_is_bytes_like(liftbridge_address: str, new_stream: StreamFactory) -> None:
    # Python's "bytes-like" is any object with the buffer protocol: array.array was
    # refused ("must be bytes-like") where a memoryview cast of the same was taken.
    name = new_stream()
    numbers: Any = array.array("i", [1, 2, 3])  # the hints say bytes; any buffer goes
    key: Any = array.array("b", [107])
    with Client([liftbridge_address]) as client:
        client.publish(name, numbers, key=key, headers={"h": numbers})
        client.publish_async(name, numbers).result(10)
        client.publish_batch(name, [numbers, (key, numbers)])
        stored = read_all(client, name)
    assert [m.value for m in stored] == [numbers.tobytes()] * 4
    assert [m.key for m in stored] == [b"k", None, None, b"k"]
    assert stored[0].headers["h"] == numbers.tobytes()


def test_publish_batch_is_ordered_bounded_and_typed(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=2)
    with Client([liftbridge_address], max_in_flight=100) as client:
        # 2,500 messages through a window of 100: in order, one outcome each.
        values = [b"%d" % i for i in range(2500)]
        outcomes = client.publish_batch(name, values)
        assert [o.offset for o in outcomes] == list(range(2500))  # type: ignore[union-attr]
        assert [m.value for m in read_all(client, name)] == values
        # Plain values, then a (key, value) pair: still one outcome each, in order.
        mixed = client.publish_batch(name, [*values[:300], (b"k", b"pair"), b"after"])
        assert [o.offset for o in mixed] == list(range(2500, 2802))  # type: ignore[union-attr]
        # (key, value, headers) triples, mixed with the other kinds.
        triples = client.publish_batch(
            name, [(b"k", b"t1", {"h": b"1", "i": b""}), (None, b"t2", None), b"t3"]
        )
        assert [o.offset for o in triples] == [2802, 2803, 2804]  # type: ignore[union-attr]
        stored = read_all(client, name)[2802:]
        ours = [{k: v for k, v in m.headers.items() if k in ("h", "i")} for m in stored]
        assert [(m.key, m.value, h) for m, h in zip(stored, ours, strict=True)] == [
            (b"k", b"t1", {"h": b"1", "i": b""}),
            (None, b"t2", {}),
            (None, b"t3", {}),
        ]
        # (key, value) pairs with a partitioner; AckPolicy.NONE gives None per message.
        keyed = client.publish_batch(name, [(b"k", b"x"), (b"k", b"y")], partitioner=ByKey())
        assert {o.partition for o in keyed} == {ByKey().partition(name, b"k", b"x", 2)}  # type: ignore[union-attr]
        assert client.publish_batch(name, [b"n"] * 3, ack_policy=AckPolicy.NONE) == [None] * 3
        # Refusals are returned per message, typed, and count as observed.
        client.set_stream_readonly(name)
        refused = client.publish_batch(name, [b"r1", b"r2"])
        assert all(isinstance(o, lb.ReadonlyPartitionError) for o in refused)
        client.flush(30)
        with pytest.raises(TypeError):
            client.publish_batch(name, ["text"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        ("", lb.ConfigurationError),
        ("a b", lb.ConfigurationError),
        ("a..b", lb.ConfigurationError),
        ("orders.*", lb.ConfigurationError),
        (5, lb.ArgumentTypeError),
        (None, lb.ArgumentTypeError),
    ],
)
def test_a_bad_stream_name_is_refused_before_a_partitioner_asks_for_its_partitions(
    liftbridge_client: Client, stream: object, error: type[Exception]
) -> None:
    # With a partitioner the partition count was asked for first: a name the server
    # cannot hold went to it in metadata requests, retried for most of a second, and
    # came back NoSuchStreamError; one of another type failed in protobuf with a bare
    # TypeError. Without a partitioner each is a ConfigurationError before the wire.
    client: Any = liftbridge_client
    for partitioner in (ByKey(), RoundRobin()):
        calls: list[Callable[[], object]] = [
            functools.partial(client.publish, stream, b"v", key=b"k", partitioner=partitioner),
            functools.partial(client.publish_async, stream, b"v", partitioner=partitioner),
            functools.partial(
                client.publish_batch, stream, [(b"k", b"v")], partitioner=partitioner
            ),
            functools.partial(client.publish_batch, stream, [b"v"], partitioner=partitioner),
        ]
        for call in calls:
            started = time.monotonic()
            with pytest.raises(error, match="'stream'"):
                call()
            assert time.monotonic() - started < 0.5, f"{call}: asked the server first"


def test_a_partitioner_class_given_for_a_partitioner_is_refused_with_a_hint(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # partitioner=ByKey (the class) called ByKey.partition unbound: a bare TypeError
    # ("missing 1 required positional argument") from inside the publish.
    name = new_stream(partitions=3)
    client: Any = liftbridge_client
    for kind in (ByKey, RoundRobin):
        for call in (
            functools.partial(client.publish, name, b"v", key=b"k", partitioner=kind),
            functools.partial(client.publish_async, name, b"v", partitioner=kind),
            functools.partial(client.publish_batch, name, [(b"k", b"v")], partitioner=kind),
        ):
            with pytest.raises(
                lb.ArgumentTypeError, match=rf"not the class; pass {kind.__name__}\(\)"
            ):
                call()
    # A partitioner's name: str has a partition method, called with four arguments.
    for call in (
        functools.partial(client.publish, name, b"v", key=b"k", partitioner="key"),
        functools.partial(client.publish_async, name, b"v", partitioner="key"),
        functools.partial(client.publish_batch, name, [(b"k", b"v")], partitioner="key"),
    ):
        with pytest.raises(lb.ArgumentTypeError, match=r"such as ByKey\(\).*not str 'key'"):
            call()
    assert all(client.fetch_partition_metadata(name, p).newest_offset == -1 for p in range(3))

    class Static:  # a class whose partition needs no instance is a partitioner
        @staticmethod
        def partition(stream: str, key: bytes | None, value: bytes, count: int) -> int:
            return count - 1

    assert client.publish(name, b"v", partitioner=Static).partition == 2
    assert [o.partition for o in client.publish_batch(name, [b"v"], partitioner=Static)] == [2]


def test_a_malformed_batch_is_refused_with_the_librarys_typed_error(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # These raised a bare TypeError (from list(), or the batch's own item check): not a
    # LiftbridgeError, so `except LiftbridgeError` let them through. One value passed
    # as `messages` was taken for a batch of its bytes (ints) or characters.
    name = new_stream()
    malformed: list[tuple[object, str]] = [
        ([b"a", (None, b"b", None, b"?")], "tuple of 4"),
        ([(b"only",)], "tuple of 1"),
        (None, "not NoneType"),
        (5, "not int"),
        (b"value", r"not bytes \(one message: \[value\]\)"),
        ("value", "not str"),
        # Iterating a dict gives its keys: each went out as a value.
        ({b"k": b"v"}, r"not a dict \(its \(key, value\) pairs: messages.items\(\)\)"),
    ]
    for messages, message in malformed:
        with pytest.raises(lb.ArgumentTypeError, match=message):
            liftbridge_client.publish_batch(name, messages)  # type: ignore[arg-type]
    assert liftbridge_client.fetch_partition_metadata(name).newest_offset == -1
    # Any other iterable of items is a batch.
    outcomes = liftbridge_client.publish_batch(name, (b"%d" % i for i in range(3)))
    assert [o.offset for o in outcomes] == [0, 1, 2]  # type: ignore[union-attr]
    liftbridge_client.publish_batch(name, {b"k": b"v"}.items())
    assert [(m.key, m.value) for m in read_all(liftbridge_client, name)[3:]] == [(b"k", b"v")]


def test_a_batch_longer_than_its_timeout_gives_each_message_the_whole_timeout(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # Keyed items take the general path, entered as max_in_flight (1,024) leaves room.
    # Their ack deadline was set when the batch was framed, so whatever was sent more
    # than `timeout` after the batch started failed at once with AckTimeoutError
    # (~40% of these 100,000), though each was acknowledged within milliseconds. The
    # batch takes 4-15 s on 2 cores; each ack is due within 2 s of its send (1 s was
    # shorter than the server's pauses on a machine loaded by the rest of the suite).
    name = new_stream()
    liftbridge_client.publish(name, b"first")  # the stream is open: no slow start
    items = [(b"k%d" % (i % 64), b"%d" % i) for i in range(100_000)]
    started = time.monotonic()
    outcomes = liftbridge_client.publish_batch(name, items, timeout=2.0)
    took = time.monotonic() - started
    failed = [(i, o) for i, o in enumerate(outcomes) if not isinstance(o, lb.Ack)]
    assert not failed, f"{len(failed)} failed in {took:.1f}s, the first: {failed[0]}"
    assert [o.offset for o in outcomes] == list(range(1, 100_001))  # type: ignore[union-attr]


def test_a_keyed_batch_lands_each_key_where_by_key_says_and_reads_the_count_once(
    liftbridge_client: Client, new_stream: StreamFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liftbridge_sync._transport.core import ClientCore

    name = new_stream(partitions=3)
    counted: list[str] = []
    count = ClientCore.partition_count

    def counting(core: ClientCore, stream: str) -> int:
        counted.append(stream)
        return count(core, stream)

    monkeypatch.setattr(ClientCore, "partition_count", counting)
    keys = [b"", b"k" * 300, *(b"key-%d" % i for i in range(400))]
    items = [(key, b"v-" + key) for key in keys]
    outcomes = liftbridge_client.publish_batch(name, items, partitioner=ByKey())
    # One look-up of the partition count for the whole batch.
    assert counted == [name]
    placed = {key: outcome.partition for key, outcome in zip(keys, outcomes, strict=True)}  # type: ignore[union-attr]
    assert placed == {key: zlib.crc32(key) % 3 for key in keys}
    stored = {
        (m.key, m.value, m.partition)
        for p in range(3)
        for m in read_all(liftbridge_client, name, p)
    }
    # An empty key is stored as no key, as protobuf and the Go client send it.
    assert stored == {(key or None, b"v-" + key, zlib.crc32(key) % 3) for key in keys}

    # Another partitioner is asked for every item, in order.
    spread = liftbridge_client.publish_batch(name, [(b"k", b"rr")] * 6, partitioner=RoundRobin())
    assert [outcome.partition for outcome in spread] == [0, 1, 2, 0, 1, 2]  # type: ignore[union-attr]

    class OutOfRange:
        def partition(self, stream: str, key: bytes | None, value: bytes, count: int) -> int:
            return count

    with pytest.raises(lb.ConfigurationError, match="not a partition"):
        liftbridge_client.publish_batch(name, [(b"k", b"x")], partitioner=OutOfRange())
    with pytest.raises(lb.ConfigurationError, match="not both"):
        liftbridge_client.publish_batch(name, [(b"k", b"x")], partition=1, partitioner=ByKey())
    # Nothing refused reached the stream.
    assert sum(len(read_all(liftbridge_client, name, p)) for p in range(3)) == len(keys) + 6


@pytest.mark.parametrize("partitioner", [None, ByKey()], ids=["no-partitioner", "by-key"])
def test_a_keyed_batch_to_one_partition_is_stored_exactly_in_order(
    liftbridge_address: str, new_stream: StreamFactory, partitioner: ByKey | None
) -> None:
    # A one-partition stream: the whole run is framed at once and entered in one call,
    # through a window smaller than the batch.
    name = new_stream()
    items: list[Any] = [(b"k%d" % i, b"v%d" % i) for i in range(250)]
    items += [(b"", b"empty key"), (None, b"no key"), b"plain", (b"k" * 300, b"long key")]
    with Client([liftbridge_address], max_in_flight=64) as client:
        outcomes = client.publish_batch(name, items, partitioner=partitioner)
        assert [o.offset for o in outcomes] == list(range(len(items)))  # type: ignore[union-attr]
        assert {o.partition for o in outcomes} == {0}  # type: ignore[union-attr]
        assert len({o.correlation_id for o in outcomes}) == len(items)  # type: ignore[union-attr]
        stored = [(m.key, m.value) for m in read_all(client, name)]
    expected = [item if type(item) is tuple else (None, item) for item in items]
    # An empty key is stored as no key, as protobuf and the Go client send it.
    assert stored == [(key or None, value) for key, value in expected]


def test_futures_work_with_wait_as_completed_and_callbacks(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    import concurrent.futures

    name = new_stream()
    futures = [liftbridge_client.publish_async(name, b"%d" % i) for i in range(300)]
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert len(done) == 300 and not not_done
    more = [liftbridge_client.publish_async(name, b"m") for _ in range(50)]
    assert len(list(concurrent.futures.as_completed(more, timeout=30))) == 50
    seen: list[int] = []
    last = liftbridge_client.publish_async(name, b"last")
    last.add_done_callback(lambda f: seen.append(f.result().offset))  # type: ignore[union-attr]
    liftbridge_client.flush(30)
    assert seen == [350] and last.done() and not last.cancel()


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_publishing_to_a_missing_stream_fails_at_once_without_metadata(
    liftbridge_address: str, transport: str
) -> None:
    # "No such stream" is retried only while the metadata lists the stream (a broker
    # still rebuilding its streams); a client without metadata asks for it first.
    with Client([liftbridge_address], publish_transport=transport) as client:  # type: ignore[arg-type]
        started = time.monotonic()
        with pytest.raises(lb.NoSuchStreamError):
            client.publish(unique(), b"x", partition=0)
        assert time.monotonic() - started < 3.0


@pytest.mark.parametrize("transport", ["grpc", "h2"])
def test_answers_decode_the_same_on_both_transports(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    # Both transports send the codec's bytes as they are and hand the publisher the
    # codec's decoded answers: acks with every field, refusals as typed errors.
    name = new_stream(partitions=2, optimistic_concurrency_control=True)
    with Client([liftbridge_address], publish_transport=transport) as client:  # type: ignore[arg-type]
        ack = client.publish(name, b"a", partition=1, correlation_id="mine", expected_offset=0)
        assert ack is not None
        assert (ack.stream, ack.partition, ack.offset, ack.correlation_id) == (name, 1, 0, "mine")
        assert ack.message_subject == f"{name}.1" and ack.ack_error is None
        with pytest.raises(lb.IncorrectOffsetError):
            client.publish(name, b"stale", partition=1, expected_offset=0)
        outcomes = client.publish_batch(
            name, [b"b", (b"k", b"c"), (None, b"d", {"h": b"v"}), b"e"], partition=1
        )
        assert [o.offset for o in outcomes if isinstance(o, lb.Ack)] == [1, 2, 3, 4]
        assert all(isinstance(o, lb.Ack) and o.partition == 1 for o in outcomes)
        client.set_stream_readonly(name, partitions=[0])
        with pytest.raises(lb.ReadonlyPartitionError):
            client.publish(name, b"x", partition=0)
        stored = read_all(client, name, 1)
    assert [m.value for m in stored] == [b"a", b"b", b"c", b"d", b"e"]
    assert (stored[2].key, stored[3].headers["h"]) == (b"k", b"v")
