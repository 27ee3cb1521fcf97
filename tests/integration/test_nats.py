"""``NatsPublisher`` against the embedded NATS server of a real Liftbridge server.

Stored messages are read back with a raw gRPC ``Subscribe`` (independent of the
client's subscription code). Waits are condition polls with deadlines.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from liftbridge_sync import Client
from liftbridge_sync._proto import api_pb2, api_pb2_grpc
from liftbridge_sync.envelope import MessageType, encode_envelope
from liftbridge_sync.errors import (
    AckTimeoutError,
    ClientClosedError,
    ConfigurationError,
    IncorrectOffsetError,
    LiftbridgeError,
    MessageTooLargeError,
    PublishRejectedError,
    WrongThreadError,
)
from liftbridge_sync.models import Ack, AckPolicy, Message, PartitionInfo
from liftbridge_sync.nats import NatsPublisher
from liftbridge_sync.nats import _thread as thread_module
from liftbridge_sync.testing import LiftbridgeEndpoint, NatsServer
from tests.stacks import thread_in
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- helpers


def read_messages(
    address: str, stream: str, count: int, *, partition: int = 0, timeout: float = 10.0
) -> list[Message]:
    """The first ``count`` messages of a partition, via a raw gRPC Subscribe."""
    request = api_pb2.SubscribeRequest(
        stream=stream, partition=partition, startPosition=api_pb2.EARLIEST
    )
    messages: list[Message] = []
    with grpc.insecure_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Subscribe(request, timeout=timeout)
        responses = iter(call)
        next(responses)  # the server's empty handshake message
        for pb in responses:
            messages.append(Message.from_proto(pb))
            if len(messages) == count:
                call.cancel()
                break
    return messages


def newest_offset(client: Client, stream: str, partition: int = 0) -> int:
    return client.fetch_partition_metadata(stream, partition).newest_offset


def make_stream(client: Client, *, partitions: int = 1, occ: bool | None = None) -> tuple[str, str]:
    """Create a stream with a unique name and subject; returns ``(subject, name)``."""
    suffix = uuid.uuid4().hex[:12]
    subject, name = f"nats-test.{suffix}", f"nats-test-{suffix}"
    client.create_stream(subject, name, partitions=partitions, optimistic_concurrency_control=occ)
    # The partition leaders subscribe to NATS asynchronously after CreateStream returns:
    # wait until every partition answers for its metadata.
    for partition in range(partitions):
        wait_until(
            lambda p=partition: _is_led(client, name, p),  # type: ignore[misc]
            10.0,
            f"partition {partition} of {name} to be led",
        )
    return subject, name


def _is_led(client: Client, stream: str, partition: int) -> bool:
    try:
        return newest_offset(client, stream, partition) == -1
    except LiftbridgeError:
        return False


@pytest.fixture
def nats_url(liftbridge_server: LiftbridgeEndpoint) -> str:
    """URL of the server's NATS (skips with an external server that names none)."""
    url = liftbridge_server.nats_url
    if url is None:
        pytest.skip("the Liftbridge server under test exposes no NATS URL")
    return url


@pytest.fixture
def publisher(nats_url: str) -> Iterator[NatsPublisher]:
    pub = NatsPublisher(nats_url, ack_timeout=10.0)
    try:
        yield pub
    finally:
        pub.close()


def _nats_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-nats" and t.is_alive()]


# ---------------------------------------------------------------- publishing


def test_message_with_key_and_headers_is_stored(
    publisher: NatsPublisher, liftbridge_client: Client, liftbridge_server: LiftbridgeEndpoint
) -> None:
    subject, name = make_stream(liftbridge_client)
    ack = publisher.publish(subject, b"hello", key=b"k1", headers={"h1": b"v1", "h2": b""})
    assert isinstance(ack, Ack)
    assert ack.stream == name
    assert ack.partition == 0
    assert ack.offset == 0
    assert ack.partition_subject == subject
    assert ack.message_subject == subject
    assert ack.ack_inbox == publisher.ack_inbox
    assert ack.ack_policy is AckPolicy.LEADER
    assert ack.ack_error is None
    assert ack.correlation_id
    assert ack.reception_timestamp_ns > 0

    [message] = read_messages(liftbridge_server.address, name, 1)
    assert message.offset == 0
    assert message.value == b"hello"
    assert message.key == b"k1"
    assert message.headers["h1"] == b"v1"
    assert message.headers["h2"] == b""
    assert message.headers["subject"] == subject.encode()
    assert message.subject == subject


def test_partition_one_of_two(
    publisher: NatsPublisher, liftbridge_client: Client, liftbridge_server: LiftbridgeEndpoint
) -> None:
    subject, name = make_stream(liftbridge_client, partitions=2)
    ack = publisher.publish(subject, b"to-p1", partition=1, key=b"k")
    assert ack is not None
    assert ack.partition == 1
    assert ack.offset == 0
    assert ack.message_subject == f"{subject}.1"
    assert ack.partition_subject == subject
    assert newest_offset(liftbridge_client, name, 1) == 0
    assert newest_offset(liftbridge_client, name, 0) == -1
    [message] = read_messages(liftbridge_server.address, name, 1, partition=1)
    assert message.value == b"to-p1"
    assert message.key == b"k"
    assert message.partition == 1
    assert message.subject == f"{subject}.1"


def test_acks_carry_consecutive_offsets(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    subject, name = make_stream(liftbridge_client)
    offsets = []
    for i in range(20):
        ack = publisher.publish(subject, f"m{i}".encode(), correlation_id=f"cid-{i}")
        assert ack is not None
        assert ack.correlation_id == f"cid-{i}"
        offsets.append(ack.offset)
    assert offsets == list(range(20))
    assert newest_offset(liftbridge_client, name) == 19


@pytest.mark.parametrize("crc", [True, False])
def test_envelope_with_and_without_crc_is_stored_as_a_message(
    crc: bool,
    publisher: NatsPublisher,
    liftbridge_client: Client,
    liftbridge_server: LiftbridgeEndpoint,
) -> None:
    subject, name = make_stream(liftbridge_client)
    ack = publisher.publish(subject, b"payload", key=b"key", headers={"x": b"y"}, crc=crc)
    assert ack is not None and ack.offset == 0
    [message] = read_messages(liftbridge_server.address, name, 1)
    # Decoded as an envelope, not stored verbatim: value is the payload only.
    assert message.value == b"payload"
    assert message.key == b"key"
    assert message.headers["x"] == b"y"


def test_ack_policy_all(publisher: NatsPublisher, liftbridge_client: Client) -> None:
    subject, _ = make_stream(liftbridge_client)
    ack = publisher.publish(subject, b"x", ack_policy=AckPolicy.ALL)
    assert ack is not None
    assert ack.ack_policy is AckPolicy.ALL
    assert ack.offset == 0


def test_ack_policy_none_resolves_without_ack(
    publisher: NatsPublisher, liftbridge_client: Client, liftbridge_server: LiftbridgeEndpoint
) -> None:
    subject, name = make_stream(liftbridge_client)
    futures = [
        publisher.publish_async(subject, f"n{i}".encode(), ack_policy=AckPolicy.NONE)
        for i in range(5)
    ]
    assert [f.result(timeout=10) for f in futures] == [None] * 5
    assert publisher.publish(subject, b"n5", ack_policy=AckPolicy.NONE) is None
    wait_until(lambda: newest_offset(liftbridge_client, name) == 5, 10.0, "6 messages stored")
    values = [m.value for m in read_messages(liftbridge_server.address, name, 6)]
    assert values == [f"n{i}".encode() for i in range(6)]


def test_ack_timeout_when_no_stream_listens(publisher: NatsPublisher) -> None:
    subject = f"nobody-listens.{uuid.uuid4().hex}"
    started = time.monotonic()
    with pytest.raises(AckTimeoutError):
        publisher.publish(subject, b"lost", timeout=0.3)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 5.0
    future = publisher.publish_async(subject, b"lost", partition=3, timeout=0.2)
    with pytest.raises(AckTimeoutError):
        future.result(timeout=10)


def test_raw_payload_is_stored_verbatim(
    publisher: NatsPublisher, liftbridge_client: Client, liftbridge_server: LiftbridgeEndpoint
) -> None:
    subject, name = make_stream(liftbridge_client, partitions=2)
    reply = f"replies.{uuid.uuid4().hex}"
    publisher.publish_raw(subject, b"plain nats data")
    publisher.publish_raw(f"{subject}.1", b"\xb9\x0e\x43\xb4 not an envelope", reply=reply)
    publisher.flush(10)
    wait_until(lambda: newest_offset(liftbridge_client, name, 0) == 0, 10.0, "raw message")
    wait_until(lambda: newest_offset(liftbridge_client, name, 1) == 0, 10.0, "raw message p1")
    [plain] = read_messages(liftbridge_server.address, name, 1)
    assert plain.value == b"plain nats data"
    assert plain.key is None
    assert plain.headers["subject"] == subject.encode()
    [broken] = read_messages(liftbridge_server.address, name, 1, partition=1)
    assert broken.value == b"\xb9\x0e\x43\xb4 not an envelope"
    assert broken.reply_subject == reply


def test_raw_data_that_would_crash_the_leader_is_refused() -> None:
    """The server slices a payload at its HeaderLen before checking it: 8 bytes with the
    magic, version 0 and a HeaderLen of 255 panicked the broker (own server: it died)."""
    from liftbridge_sync.testing import LiftbridgeServer

    crashing = b"\xb9\x0e\x43\xb4\x00\xff\x00\x00"
    with LiftbridgeServer() as server, Client(server.address) as client:
        subject, name = make_stream(client)
        with NatsPublisher(server.nats_url, ack_timeout=10.0) as publisher:
            with pytest.raises(ConfigurationError, match="HeaderLen"):
                publisher.publish_raw(subject, crashing)
            with pytest.raises(ConfigurationError, match="HeaderLen"):
                publisher.publish_raw(subject, crashing[:5] + b"\x0d" + crashing[6:] + b"1234")
            # HeaderLen at the very end is an envelope with an empty payload, and one
            # with another version is plain data: the leader survives both.
            publisher.publish_raw(subject, crashing[:5] + b"\x08" + crashing[6:])
            publisher.publish_raw(subject, crashing[:4] + b"\x01" + crashing[5:])
            ack = publisher.publish(subject, b"after")
            assert ack is not None and ack.offset == 2
        stored = read_messages(server.address, name, 3)
        assert [m.value for m in stored] == [b"", crashing[:4] + b"\x01" + crashing[5:], b"after"]
        assert server.running


def test_many_concurrent_publishes_from_several_threads(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    subject, name = make_stream(liftbridge_client, partitions=2)
    threads, per_thread = 8, 250
    results: list[list[concurrent.futures.Future[Ack | None]]] = [[] for _ in range(threads)]
    sync_acks: list[Ack | None] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def work(index: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            results[index].append(
                publisher.publish_async(subject, f"{index}-{i}".encode(), partition=i % 2)
            )
        ack = publisher.publish(subject, f"{index}-sync".encode())
        with lock:
            sync_acks.append(ack)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert not worker.is_alive()
    acks = [f.result(timeout=30) for futures in results for f in futures]
    acks.extend(sync_acks)
    assert all(a is not None for a in acks)
    by_partition: dict[int, list[int]] = {0: [], 1: []}
    for ack in acks:
        assert ack is not None
        by_partition[ack.partition].append(ack.offset)
    total = threads * (per_thread + 1)
    p0 = threads * (per_thread // 2 + 1)
    assert sorted(by_partition[0]) == list(range(p0))
    assert sorted(by_partition[1]) == list(range(total - p0))
    assert newest_offset(liftbridge_client, name, 0) == p0 - 1
    assert newest_offset(liftbridge_client, name, 1) == total - p0 - 1


def test_messages_of_one_thread_keep_their_order(
    publisher: NatsPublisher, liftbridge_client: Client, liftbridge_server: LiftbridgeEndpoint
) -> None:
    subject, name = make_stream(liftbridge_client)
    futures = [publisher.publish_async(subject, f"{i}".encode()) for i in range(300)]
    offsets = [f.result(timeout=30).offset for f in futures]  # type: ignore[union-attr]
    assert offsets == list(range(300))
    values = [m.value for m in read_messages(liftbridge_server.address, name, 300)]
    assert values == [f"{i}".encode() for i in range(300)]


def test_flush_waits_for_every_ack(publisher: NatsPublisher, liftbridge_client: Client) -> None:
    subject, _ = make_stream(liftbridge_client)
    futures = [publisher.publish_async(subject, b"x") for _ in range(100)]
    publisher.flush(30)
    assert all(f.done() for f in futures)


def test_flush_times_out_on_a_pending_ack(publisher: NatsPublisher) -> None:
    future = publisher.publish_async(f"nobody-listens.{uuid.uuid4().hex}", b"x", timeout=30)
    with pytest.raises(TimeoutError):
        publisher.flush(0.2)
    assert not future.done()


def test_acks_are_still_read_after_flushes_that_timed_out(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    """nats-py cancels its PONG future when its flush times out, and the late PONG then
    killed its read loop: in 4 of 6 runs every later publish failed with
    AckTimeoutError though the server stored each message."""
    subject, stream = make_stream(liftbridge_client)
    first = publisher.publish(subject, b"first")
    assert first is not None and first.offset == 0
    timed_out = 0
    for _ in range(30):
        try:
            publisher.flush(1e-9)  # the PING's PONG cannot come back this fast
        except TimeoutError:
            timed_out += 1
    assert timed_out > 0
    acks = [publisher.publish(subject, f"after-{i}".encode()) for i in range(5)]
    assert [ack.offset for ack in acks if ack is not None] == [1, 2, 3, 4, 5]
    assert liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset == 5


# ---------------------------------------------------------------- optimistic concurrency


def test_optimistic_concurrency_incorrect_offset(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    subject, name = make_stream(liftbridge_client, occ=True)
    first = publisher.publish(subject, b"a", expected_offset=0)
    assert first is not None and first.offset == 0
    with pytest.raises(IncorrectOffsetError) as excinfo:
        publisher.publish(subject, b"b", expected_offset=5)
    assert excinfo.value.code == "INCORRECT_OFFSET"
    with pytest.raises(IncorrectOffsetError):
        publisher.publish(subject, b"b", expected_offset=0)
    second = publisher.publish(subject, b"b", expected_offset=1)
    assert second is not None and second.offset == 1
    unchecked = publisher.publish(subject, b"c")  # expected offset -1: no check
    assert unchecked is not None and unchecked.offset == 2
    assert newest_offset(liftbridge_client, name) == 2


# ---------------------------------------------------------------- bypassed gRPC checks


def test_paused_partition_is_not_resumed(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    subject, name = make_stream(liftbridge_client)
    assert publisher.publish(subject, b"before") is not None
    liftbridge_client.pause_stream(name)

    def partition() -> PartitionInfo:
        # Cluster metadata: a paused partition has no leader to ask for its metadata.
        info = liftbridge_client.fetch_metadata(name).partition(name, 0)
        assert info is not None
        return info

    wait_until(lambda: partition().paused, 10.0, "pause")
    with pytest.raises(AckTimeoutError):
        publisher.publish(subject, b"while paused", timeout=0.5)
    assert partition().paused
    # Resuming (with a gRPC publish) shows that only the first message was stored.
    ack = liftbridge_client.publish(name, b"after")
    assert ack is not None and ack.offset == 1


def test_readonly_partition_gives_an_ack_timeout(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    subject, name = make_stream(liftbridge_client)
    assert publisher.publish(subject, b"before") is not None
    liftbridge_client.set_stream_readonly(name)
    wait_until(lambda: liftbridge_client.fetch_partition_metadata(name).readonly, 10.0, "read-only")
    with pytest.raises(AckTimeoutError):
        publisher.publish(subject, b"refused", timeout=0.5)
    assert newest_offset(liftbridge_client, name) == 0


def test_too_large_for_nats_is_refused_before_the_wire(publisher: NatsPublisher) -> None:
    """Over the NATS server's max_payload (1 MiB here, the default) a publish was
    queued, took a slot and failed its future later (PublishRejectedError from
    nats-py on the loop thread); now the call itself refuses it."""
    subject = f"nobody-listens.{uuid.uuid4().hex}"
    limit = 1024 * 1024
    publisher.publish_raw(subject, b"x" * limit)  # connects; exactly the limit is taken
    with pytest.raises(MessageTooLargeError, match="at most 1,048,576 .its max_payload") as raw:
        publisher.publish_raw(subject, b"x" * (limit + 1))
    assert raw.value.code == "TOO_LARGE"
    with pytest.raises(MessageTooLargeError) as excinfo:
        publisher.publish_async(subject, b"x" * (2 * 1024 * 1024))
    assert isinstance(excinfo.value, PublishRejectedError) and excinfo.value.code == "TOO_LARGE"
    # The envelope counts: a value of the limit itself is over it with its header.
    with pytest.raises(MessageTooLargeError, match="with its envelope"):
        publisher.publish(subject, b"x" * limit)
    # The publisher keeps working afterwards.
    with pytest.raises(AckTimeoutError):
        publisher.publish(subject, b"small", timeout=0.2)


# ---------------------------------------------------------------- acks on the inbox


def _ack_envelope(correlation_id: str, **fields: object) -> bytes:
    pb = api_pb2.Ack(correlationId=correlation_id, **fields)  # type: ignore[arg-type]
    return encode_envelope(pb.SerializeToString(), MessageType.ACK, crc=False)


def test_acks_are_matched_by_correlation_id(publisher: NatsPublisher) -> None:
    """Acks injected on the ack inbox: errors map to typed errors, junk is ignored."""
    subject = f"nobody-listens.{uuid.uuid4().hex}"
    ok = publisher.publish_async(subject, b"1", partition=4, correlation_id="ok", timeout=30)
    big = publisher.publish_async(subject, b"2", correlation_id="big", timeout=30)
    enc = publisher.publish_async(subject, b"3", correlation_id="enc", timeout=30)
    with pytest.raises(ConfigurationError, match="already awaiting"):
        publisher.publish_async(subject, b"dup", correlation_id="ok")

    inbox = publisher.ack_inbox
    publisher.publish_raw(inbox, b"not an envelope")
    publisher.publish_raw(inbox, _ack_envelope("unknown-id", offset=9))
    publisher.publish_raw(inbox, _ack_envelope("ok", offset=42, stream="s", msgSubject="x.4"))
    publisher.publish_raw(inbox, _ack_envelope("big", ackError=api_pb2.Ack.TOO_LARGE))
    publisher.publish_raw(inbox, _ack_envelope("enc", ackError=api_pb2.Ack.ENCRYPTION))

    ack = ok.result(timeout=10)
    assert ack is not None
    assert (ack.offset, ack.stream, ack.partition, ack.message_subject) == (42, "s", 4, "x.4")
    with pytest.raises(PublishRejectedError) as too_large:
        big.result(timeout=10)
    assert too_large.value.code == "TOO_LARGE"
    with pytest.raises(PublishRejectedError) as encryption:
        enc.result(timeout=10)
    assert encryption.value.code == "ENCRYPTION"
    # A second ack for a settled id is ignored, and the id is free again. Acks are
    # handled in order, so once "marker" resolves the duplicate has been handled.
    marker = publisher.publish_async(subject, b"m", correlation_id="marker", timeout=30)
    publisher.publish_raw(inbox, _ack_envelope("ok", offset=43))
    publisher.publish_raw(inbox, _ack_envelope("marker", offset=44))
    assert marker.result(timeout=10) is not None
    again = publisher.publish_async(subject, b"4", correlation_id="ok", timeout=0.2)
    with pytest.raises(AckTimeoutError):
        again.result(timeout=10)


# ---------------------------------------------------------------- threads and closing


def test_thread_starts_on_first_use_and_close_joins_it(
    nats_url: str, liftbridge_client: Client
) -> None:
    subject, _ = make_stream(liftbridge_client)
    before = set(_nats_threads())
    pub = NatsPublisher(nats_url)
    assert set(_nats_threads()) == before
    assert pub.publish(subject, b"x") is not None
    started = [t for t in _nats_threads() if t not in before]
    assert len(started) == 1 and started[0].daemon
    pub.close()
    assert not started[0].is_alive()
    pub.close()  # idempotent
    with pytest.raises(ClientClosedError):
        pub.publish(subject, b"y")


def test_a_host_name_is_resolved_on_a_named_thread_joined_on_close(
    nats_url: str, liftbridge_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_name = nats_url.replace("127.0.0.1", "localhost")
    if by_name == nats_url:
        pytest.skip("the server's NATS URL names no 127.0.0.1 to swap for a host name")
    subject, _ = make_stream(liftbridge_client)
    started: list[str] = []
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    before = set(threading.enumerate())
    monkeypatch.setattr(threading.Thread, "start", recording_start)
    pub = NatsPublisher(by_name)
    try:
        assert pub.publish(subject, b"x") is not None
    finally:
        pub.close()
    assert "liftbridge-nats-dns" in started
    assert [name for name in started if not name.startswith("liftbridge-")] == []
    assert [t.name for t in threading.enumerate() if t not in before] == []


def test_close_fails_pending_publishes(nats_url: str) -> None:
    pub = NatsPublisher(nats_url)
    subject = f"nobody-listens.{uuid.uuid4().hex}"
    futures = [pub.publish_async(subject, b"x", timeout=60) for _ in range(10)]
    started = time.monotonic()
    pub.close()
    assert time.monotonic() - started < 10
    for future in futures:
        with pytest.raises(ClientClosedError):
            future.result(timeout=1)
    assert not _nats_threads()


def test_close_from_several_threads(nats_url: str) -> None:
    pub = NatsPublisher(nats_url)
    pub.publish_raw(f"nobody-listens.{uuid.uuid4().hex}", b"x")
    closers = [threading.Thread(target=pub.close) for _ in range(4)]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(timeout=30)
        assert not closer.is_alive()
    assert not _nats_threads()


def test_context_manager_flushes_data_on_close(nats_url: str, liftbridge_client: Client) -> None:
    subject, name = make_stream(liftbridge_client)
    with NatsPublisher(nats_url) as pub:
        for i in range(50):
            pub.publish_async(subject, f"{i}".encode(), ack_policy=AckPolicy.NONE)
    wait_until(lambda: newest_offset(liftbridge_client, name) == 49, 10.0, "50 messages")


def test_done_callbacks_run_on_the_nats_thread(
    publisher: NatsPublisher, liftbridge_client: Client
) -> None:
    subject, _ = make_stream(liftbridge_client)
    seen: list[object] = []
    chained: list[concurrent.futures.Future[Ack | None]] = []
    done = threading.Event()

    def callback(future: concurrent.futures.Future[Ack | None]) -> None:
        seen.append(threading.current_thread().name)
        # The blocking calls would wait for this very thread: refused, with the
        # library's own error (it was a plain RuntimeError).
        for blocking in (
            lambda: publisher.publish(subject, b"blocking"),
            lambda: publisher.publish_raw(subject, b"blocking"),
            lambda: publisher.flush(5),
        ):
            try:
                blocking()
            except Exception as exc:
                seen.append(exc)
        chained.append(publisher.publish_async(subject, b"chained"))
        done.set()

    # A future already done when the callback is added runs it on the caller's thread, and
    # the ack may well be back by then: hold the NATS thread inside a gate callback while
    # "first" is published and its callback added, so that "first" is surely pending.
    registered = threading.Event()
    gate_threads: list[str] = []
    gates = 0

    def gate(_: object) -> None:
        gate_threads.append(threading.current_thread().name)
        if gate_threads[-1] == "liftbridge-nats":
            registered.wait(10)

    while not gate_threads or gate_threads[-1] != "liftbridge-nats":
        assert gates < 20, "every gate's ack was back before its callback was added"
        gates += 1
        publisher.publish_async(subject, b"gate").add_done_callback(gate)
        wait_until(lambda n=gates: len(gate_threads) == n, 10.0, "the gate callback")  # type: ignore[misc]
    first = publisher.publish_async(subject, b"first")
    assert not first.done()
    first.add_done_callback(callback)
    registered.set()
    assert done.wait(10)
    assert seen[0] == "liftbridge-nats"
    refusals = seen[1:]
    assert [type(exc) for exc in refusals] == [WrongThreadError] * 3, refusals
    for exc, name in zip(refusals, ("publish", "publish_raw", "flush"), strict=True):
        assert isinstance(exc, LiftbridgeError) and isinstance(exc, RuntimeError)  # as before
        assert str(exc).startswith(f"NatsPublisher.{name} blocks"), exc
        assert "liftbridge-nats thread" in str(exc) and "publish_async" in str(exc)
    ack, first_ack = chained[0].result(timeout=10), first.result(timeout=0)
    assert ack is not None and first_ack is not None
    assert (first_ack.offset, ack.offset) == (gates, gates + 1)


def test_close_from_a_done_callback(nats_url: str, liftbridge_client: Client) -> None:
    subject, _ = make_stream(liftbridge_client)
    pub = NatsPublisher(nats_url)
    assert pub.publish(subject, b"first") is not None
    [thread] = _nats_threads()
    closed_on: list[str] = []

    def close(_: object) -> None:
        closed_on.append(threading.current_thread().name)
        pub.close()

    # Still pending when the callback is added: it runs on the nats thread at the timeout.
    pending = pub.publish_async(f"nobody-listens.{uuid.uuid4().hex}", b"x", timeout=0.3)
    pending.add_done_callback(close)
    with pytest.raises(AckTimeoutError):
        pending.result(timeout=10)
    thread.join(timeout=10)
    assert closed_on == ["liftbridge-nats"]
    assert not thread.is_alive()
    assert pub.closed
    pub.close()


def test_close_from_another_thread_wakes_a_flush_held_by_a_blocking_done_callback(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A done-callback that blocks holds the liftbridge-nats thread: flush(None) waited
    # on it without end, and a close() from another thread, which gives up on that
    # thread after its bound, left the flush waiting still.
    monkeypatch.setattr(thread_module, "CLOSE_MARGIN", 0.5)
    pub = NatsPublisher(nats_url)
    release = threading.Event()
    blocked = threading.Event()

    def block(_: object) -> None:
        blocked.set()
        release.wait(60)

    outcome: list[BaseException] = []

    def flush() -> None:
        try:
            pub.flush()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    flusher = threading.Thread(target=flush, name="flusher", daemon=True)
    try:
        pub.publish_raw("nats-test.connect", b"x")  # connected
        # Nobody acks it: it times out on the liftbridge-nats thread, which runs the
        # callback there.
        stuck = pub.publish_async(f"nobody-listens.{uuid.uuid4().hex}", b"x", timeout=0.2)
        stuck.add_done_callback(block)
        assert blocked.wait(10)
        queued = pub.publish_async("nats-test.queued", b"y")  # behind the callback
        flusher.start()
        wait_until(
            # Future.result(), or the package's sliced wait (wait_future).
            lambda: thread_in(flusher, "result") or thread_in(flusher, "wait_sliced"),
            what="the flush waiting",
        )
        started = time.monotonic()
        pub.close(0.2)
        flusher.join(10)
        assert not flusher.is_alive(), "close() did not wake the flush"
        assert time.monotonic() - started < 5.0
        assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError), outcome
        with pytest.raises(ClientClosedError):
            queued.result(timeout=0)
    finally:
        release.set()
    wait_until(lambda: not _nats_threads(), timeout=10, what="the loop thread freed")


@pytest.mark.parametrize(
    "options",
    [{"max_reconnect_attempts": "3"}, {"name": b"\xff"}, {"pedantic": True, "typo_option": 1}],
)
def test_nats_options_nats_py_refuses_are_a_configuration_error(
    nats_url: str, options: dict[str, object]
) -> None:
    """NATS is up: a bad option used to be a retryable BrokerUnavailableError."""
    with pytest.raises(ConfigurationError) as info:
        with NatsPublisher(nats_url, **options) as publisher:  # type: ignore[arg-type]
            publisher.publish("nats-options.test", b"x", ack_policy=AckPolicy.NONE)
    assert not info.value.retryable
    assert not _nats_threads()


def test_a_nats_outage_longer_than_nats_py_retries_is_survived(tmp_path: Path) -> None:
    # nats-py gives up after 60 reconnect attempts (2 minutes by default) and closes the
    # connection: the publisher then failed every publish for good.
    server = NatsServer(tmp_path).start()
    failures: list[Exception] = []
    reconnected = threading.Event()
    gave_up = threading.Event()

    async def count_failures(exc: Exception) -> None:
        failures.append(exc)

    async def on_reconnect() -> None:
        reconnected.set()

    async def on_closed() -> None:
        gave_up.set()

    pub = NatsPublisher(
        server.url,
        reconnect_time_wait=0.01,
        error_cb=count_failures,
        reconnected_cb=on_reconnect,
        closed_cb=on_closed,
    )
    try:
        pub.publish_raw("outage", b"before")
        server.stop()
        wait_until(lambda: len(failures) > 80 or gave_up.is_set(), timeout=60, what="80 attempts")
        assert not gave_up.is_set()
        server.start()  # on the same port
        assert reconnected.wait(30)
        pub.publish_raw("outage", b"after")
        pub.flush(10)
    finally:
        pub.close()
        server.stop()


def test_close_cuts_off_a_nats_server_that_stopped_reading(tmp_path: Path) -> None:
    # Closing the NATS connection first wrote nats-py's buffer out to a server that read
    # nothing: close(1.0) gave up after 11 s, and the liftbridge-nats thread died with
    # "RuntimeError: Event loop stopped before Future completed".
    server = NatsServer(tmp_path).start()
    assert server.pid is not None
    pub = NatsPublisher(server.url, ack_timeout=1.0, max_in_flight=4096)
    try:
        pub.publish_raw("stalled", b"x")
        os.kill(server.pid, signal.SIGSTOP)
        futures = [
            pub.publish_async("stalled", b"z" * 10_000, ack_policy=AckPolicy.NONE)
            for _ in range(3000)  # 30 MB: more than the sockets hold
        ]
        _, not_done = concurrent.futures.wait(futures, timeout=30)
        assert not not_done
        started = time.monotonic()
        pub.close(1.0)
        assert time.monotonic() - started < 4.0
        assert not _nats_threads()
    finally:
        pub.close()
        os.kill(server.pid, signal.SIGCONT)
        server.stop()
