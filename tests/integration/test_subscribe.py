"""Subscriptions against the real Liftbridge server."""

from __future__ import annotations

import gc
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import liftbridge_sync as lb
from liftbridge_sync import (
    AckPolicy,
    Client,
    StartAt,
    StopAt,
    StreamSubscription,
    Subscription,
)
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync.models import Message
from liftbridge_sync.testing import LiftbridgeServer
from tests.signals import signal_another_thread
from tests.waiting import wait_until

from ._pubdata import Record, publish, publish_values
from .conftest import StreamFactory

pytestmark = pytest.mark.integration


def take(sub: Subscription | StreamSubscription, n: int, timeout: float = 10.0) -> list[Message]:
    """Exactly ``n`` messages, failing if they do not arrive within ``timeout``."""
    deadline = time.monotonic() + timeout
    return [sub.get(max(0.0, deadline - time.monotonic())) for _ in range(n)]


def drain_many(
    sub: Subscription | StreamSubscription, most: int
) -> list[tuple[int | None, list[Message]]]:
    """Every ``get_many(most)`` batch until the end, each with the partition
    subscription's ``last_offset`` right after it (``None`` for a whole stream)."""
    batches: list[tuple[int | None, list[Message]]] = []
    while True:
        try:
            batch = sub.get_many(most, timeout=10)
        except StopIteration:
            return batches
        last = sub.last_offset if isinstance(sub, Subscription) else None
        batches.append((last, batch))


def offsets(messages: list[Message]) -> list[int]:
    return [m.offset for m in messages]


@pytest.fixture
def stream5(liftbridge_address: str, new_stream: StreamFactory) -> str:
    """A one-partition stream holding ``m0`` … ``m4`` at offsets 0 … 4."""
    name = new_stream()
    publish_values(liftbridge_address, name, 5)
    return name


# ---------------------------------------------------------------------- positions


def test_earliest_to_latest_is_finite(liftbridge_client: Client, stream5: str) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.earliest(), stop=StopAt.latest())
    messages = list(sub)
    assert offsets(messages) == [0, 1, 2, 3, 4]
    assert [m.value for m in messages] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert sub.last_offset == 4
    with pytest.raises(StopIteration):
        next(sub)


def test_keys_headers_and_timestamps_survive(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    before = time.time_ns()
    records = [
        Record(b"v0", key=b"k0", headers={"h": b"1", "bin": b"\x00\xff"}),
        Record(b"", key=b"", headers={}),
        Record(b"\x00" * 1000, key=b"k2"),
    ]
    publish(liftbridge_address, name, records)
    after = time.time_ns()
    got = list(liftbridge_client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()))
    assert [(m.key, m.value) for m in got] == [(b"k0", b"v0"), (None, b""), (b"k2", b"\x00" * 1000)]
    assert got[0].headers["h"] == b"1" and got[0].headers["bin"] == b"\x00\xff"
    assert got[0].headers["subject"] == name.encode()
    for m in got:
        assert m.stream == name and m.partition == 0 and m.subject == name
        assert before <= m.timestamp_ns <= after
        assert m.timestamp is not None and m.timestamp.tzinfo is not None


def test_start_offset_and_stop_offset(liftbridge_client: Client, stream5: str) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.offset(1), stop=StopAt.offset(3))
    assert offsets(list(sub)) == [1, 2, 3]


def test_start_offset_beyond_the_end_waits_for_it(
    liftbridge_client: Client, liftbridge_address: str, stream5: str
) -> None:
    with liftbridge_client.subscribe(stream5, start=StartAt.offset(6)) as sub:
        with pytest.raises(TimeoutError):
            sub.get(0.2)
        publish_values(liftbridge_address, stream5, 3, start=5)
        assert [m.value for m in take(sub, 1)] == [b"m6"]


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_start_offset_beyond_the_end_is_the_first_delivered(
    liftbridge_address: str, stream5: str, transport: str
) -> None:
    # v1.9.0 answers a start above the high watermark (4) with a reader that waits for
    # the watermark to move, then reads from the old watermark + 1 (5): the messages
    # published while the read is blocked, on the same call, begin below the start.
    with (
        Client([liftbridge_address], subscribe_transport=transport) as client,
        client.subscribe(stream5, start=StartAt.offset(7)) as sub,
    ):
        got: list[Message] = []
        read = threading.Thread(target=lambda: got.extend(take(sub, 2, timeout=20)))
        read.start()
        publish_values(liftbridge_address, stream5, 4, start=5)
        read.join(25)
        assert not read.is_alive()
        assert offsets(got) == [7, 8]


def test_start_latest_then_follow(
    liftbridge_client: Client, liftbridge_address: str, stream5: str
) -> None:
    with liftbridge_client.subscribe(stream5, start=StartAt.latest()) as sub:
        assert offsets(take(sub, 1)) == [4]
        publish_values(liftbridge_address, stream5, 2, start=5)
        assert offsets(take(sub, 2)) == [5, 6]


def test_new_only_skips_existing_messages(
    liftbridge_client: Client, liftbridge_address: str, stream5: str
) -> None:
    with liftbridge_client.subscribe(stream5) as sub:
        publish_values(liftbridge_address, stream5, 2, start=5)
        assert offsets(take(sub, 2)) == [5, 6]


def test_timestamps_and_time_delta(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    publish_values(liftbridge_address, name, 3)
    got = list(liftbridge_client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()))
    middle = got[1].timestamp_ns
    as_ns = liftbridge_client.subscribe(name, start=StartAt.timestamp(middle), stop=StopAt.latest())
    assert offsets(list(as_ns)) == [1, 2]
    as_dt = datetime.fromtimestamp(got[1].timestamp_ns / 1e9 - 1e-6, UTC)
    sub = liftbridge_client.subscribe(name, start=StartAt.timestamp(as_dt), stop=StopAt.latest())
    assert offsets(list(sub)) == [1, 2]
    stop_ts = liftbridge_client.subscribe(
        name, start=StartAt.earliest(), stop=StopAt.timestamp(middle)
    )
    assert offsets(list(stop_ts)) == [0, 1]
    recent = liftbridge_client.subscribe(name, start=StartAt.time_delta(60), stop=StopAt.latest())
    assert offsets(list(recent)) == [0, 1, 2]
    with liftbridge_client.subscribe(name, start=StartAt.time_delta(0)) as future:
        with pytest.raises(TimeoutError):
            future.get(0.1)


def test_stop_latest_on_an_empty_partition_is_an_empty_iterator(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream()
    assert (
        list(liftbridge_client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()))
        == []
    )


def test_stop_before_start_is_an_empty_range(liftbridge_client: Client, stream5: str) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.offset(3), stop=StopAt.offset(1))
    assert list(sub) == []


def test_a_read_ended_by_its_stop_or_an_empty_range_is_exhausted(
    liftbridge_client: Client, stream5: str, new_stream: StreamFactory
) -> None:
    """``exhausted`` says the iteration ended because nothing more is there for it, however
    the end was found: the server's stop, the client's (a stop time, ended before the first
    later message), or a range known to be empty without subscribing."""
    client = liftbridge_client
    by_offset = client.subscribe(stream5, start=StartAt.earliest(), stop=StopAt.offset(4))
    assert offsets(list(by_offset)) == [0, 1, 2, 3, 4] and by_offset.exhausted
    with client.subscribe(stream5, start=StartAt.offset(1), stop=StopAt.offset(1)) as one:
        second = one.get(10)
    by_time = client.subscribe(
        stream5, start=StartAt.earliest(), stop=StopAt.timestamp(second.timestamp_ns)
    )
    assert offsets(list(by_time)) == [0, 1] and by_time.exhausted
    backwards = client.subscribe(stream5, start=StartAt.offset(3), stop=StopAt.offset(1))
    assert list(backwards) == [] and backwards.exhausted
    empty = client.subscribe(new_stream(), start=StartAt.earliest(), stop=StopAt.latest())
    assert list(empty) == [] and empty.exhausted
    closed = client.subscribe(stream5, start=StartAt.earliest(), stop=StopAt.offset(4))
    assert closed.get(10).offset == 0
    closed.close()
    assert list(closed) == [] and not closed.exhausted


def test_missing_stream_or_partition(liftbridge_client: Client, stream5: str) -> None:
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.subscribe("no-such-stream-here", start=StartAt.earliest())
    with pytest.raises(lb.NoSuchPartitionError):
        liftbridge_client.subscribe(stream5, partition=3)


def test_bad_arguments(liftbridge_client: Client) -> None:
    for call in (
        lambda: liftbridge_client.subscribe("", start=StartAt.earliest()),
        lambda: liftbridge_client.subscribe("s", partition=-1),
        lambda: liftbridge_client.subscribe("s", start="earliest"),  # type: ignore[arg-type]
        lambda: liftbridge_client.subscribe("s", stop=3),  # type: ignore[arg-type]
        lambda: liftbridge_client.subscribe("s", reverse=1),  # type: ignore[arg-type]
    ):
        with pytest.raises(lb.ConfigurationError):
            call()


def test_read_isr_replica(liftbridge_client: Client, stream5: str) -> None:
    sub = liftbridge_client.subscribe(
        stream5, start=StartAt.earliest(), stop=StopAt.latest(), read_isr_replica=True
    )
    assert offsets(list(sub)) == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------------- blocking and closing


def test_close_from_another_thread_ends_a_blocked_iteration(
    liftbridge_client: Client, stream5: str
) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.earliest())
    seen: list[int] = []
    done = threading.Event()

    def consume() -> None:
        for msg in sub:
            seen.append(msg.offset)
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    wait_until(lambda: len(seen) == 5)
    started = time.monotonic()
    sub.close()
    assert done.wait(5)
    assert time.monotonic() - started < 1.0
    thread.join()
    assert seen == [0, 1, 2, 3, 4]
    sub.close()  # idempotent
    with pytest.raises(StopIteration):
        sub.get(0.1)


def test_client_close_ends_subscriptions_and_the_timer_thread(
    liftbridge_address: str, stream5: str
) -> None:
    # grpcio's reads take no deadline: a get() timeout is the timer thread cancelling
    # the call (the h2 reader waits on its socket with the deadline instead).
    client = Client(liftbridge_address, subscribe_transport="grpc")
    sub = client.subscribe(stream5, start=StartAt.earliest())
    assert offsets(take(sub, 5)) == [0, 1, 2, 3, 4]
    with pytest.raises(TimeoutError):
        sub.get(0.05)
    assert any(t.name == "liftbridge-timer" for t in threading.enumerate())
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(list(sub)))
    thread.start()
    client.close()
    thread.join(5)
    assert result == [[]]
    assert not any(t.name == "liftbridge-timer" for t in threading.enumerate())


def test_get_timeout_on_an_idle_stream_loses_nothing(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    with liftbridge_client.subscribe(name) as sub:  # new-only, nothing received yet
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                sub.get(0.1)
            assert time.monotonic() - started < 1.0
        # Published while no read is in progress: a resubscribe must still see them.
        publish_values(liftbridge_address, name, 3)
        assert offsets(take(sub, 3)) == [0, 1, 2]
        with pytest.raises(TimeoutError):
            sub.get(0.1)
        publish_values(liftbridge_address, name, 2, start=3)
        assert [m.value for m in take(sub, 2)] == [b"m3", b"m4"]
        assert sub.last_offset == 4


def _poll_with_get_0(sub: Subscription, n: int, within: float = 10.0) -> list[Message]:
    """``n`` messages taken by a ``get(0)`` polling loop (what it has after ``within``
    seconds if fewer come)."""
    got: list[Message] = []
    deadline = time.monotonic() + within
    while len(got) < n and time.monotonic() < deadline:
        try:
            got.append(sub.get(0))
        except TimeoutError:
            continue
    return got


def test_get_timeouts_keep_the_call_and_a_get_0_poll_loop_takes_what_arrived(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    # With the default (h2) transport a get() timeout leaves the call open: no
    # resubscribe per timeout, and get(0) hands out what has arrived. Before, every
    # timeout cancelled the call and the next read subscribed again; a get(0) polling
    # loop then subscribed and cancelled on every call and received nothing until a
    # reply happened to beat its own cancel (94 calls for a stored message).
    name = new_stream()
    with Client(liftbridge_address) as client, client.subscribe(name) as sub:
        for _ in range(20):
            with pytest.raises(TimeoutError):
                sub.get(0.01)
        publish_values(liftbridge_address, name, 3)
        assert offsets(_poll_with_get_0(sub, 3)) == [0, 1, 2]
        with pytest.raises(TimeoutError):
            sub.get(0)
        assert sub.stats().resubscribes == 0
    # Stored before the subscription: the first get(0) calls connect, later ones read.
    with Client(liftbridge_address) as client:
        with client.subscribe(name, start=StartAt.earliest()) as sub:
            assert offsets(_poll_with_get_0(sub, 3)) == [0, 1, 2]
            assert sub.stats().resubscribes == 0


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_get_many_hands_out_what_is_at_hand_in_order(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    name = new_stream()
    publish_values(liftbridge_address, name, 50)
    with (
        Client(liftbridge_address, subscribe_transport=transport) as client,
        client.subscribe(name, start=StartAt.earliest(), stop=StopAt.offset(49)) as sub,
    ):
        batches = drain_many(sub, 7)
        assert all(sub_last == batch[-1].offset for sub_last, batch in batches)
        got = [m for _, batch in batches for m in batch]
        sizes = [len(batch) for _, batch in batches]
        assert offsets(got) == list(range(50))
        assert min(sizes) >= 1 and max(sizes) <= 7
        if transport == "h2":  # read in bulk: the stored messages come in few reads
            assert max(sizes) == 7
        assert [m.value for m in got[:2]] == [b"m0", b"m1"]
        with pytest.raises(StopIteration):
            sub.get_many(7, timeout=1)


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_the_wire_batches_of_bulk_readers_match_get_many(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    # The Spark source reads wire messages in bulk: the same messages, in the same
    # batches, with the same position kept as get_many's views.
    name = new_stream()
    publish_values(liftbridge_address, name, 30)
    with Client(liftbridge_address, subscribe_transport=transport) as client:
        with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.offset(29)) as sub:
            wire: list[api_pb2.Message] = []
            while len(wire) < 30:
                batch = sub._get_many_wire(7, timeout=10)
                assert 1 <= len(batch) <= 7
                assert all(type(m) is api_pb2.Message for m in batch)
                assert sub.last_offset == batch[-1].offset
                wire += batch
            with pytest.raises(StopIteration):
                sub._get_many_wire(7, timeout=1)
        assert [m.offset for m in wire] == list(range(30))
        assert [m.value for m in wire] == [b"m%d" % i for i in range(30)]
        with client.subscribe(name, start=StartAt.earliest()) as sub:
            with pytest.raises(lb.ConfigurationError):
                sub._get_many_wire(0, timeout=1)  # checked before anything is taken
            assert sub.get_many(3, timeout=10)[0].offset == 0  # nothing was taken


def test_get_many_waits_for_the_first_message_only(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    with liftbridge_client.subscribe(name) as sub:  # new-only, nothing received yet
        with pytest.raises(TimeoutError):
            sub.get_many(10, timeout=0.1)
        publish_values(liftbridge_address, name, 3)
        got = sub.get_many(1, timeout=10)
        assert offsets(got) == [0]  # never more than asked for
        got += take(sub, 2)
        assert offsets(got) == [0, 1, 2]
        for bad in (0, -1):
            with pytest.raises(lb.ConfigurationError):
                sub.get_many(bad, timeout=1)
        for wrong in (True, 2.0, "3"):
            with pytest.raises(lb.ArgumentTypeError):
                sub.get_many(wrong, timeout=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- terminal states


def test_pause_raises_partition_paused(
    liftbridge_client: Client, liftbridge_address: str, stream5: str
) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.earliest())
    assert offsets(take(sub, 5)) == [0, 1, 2, 3, 4]
    liftbridge_client.pause_stream(stream5)
    with pytest.raises(lb.PartitionPausedError):
        sub.get(10)
    with pytest.raises(StopIteration):
        next(sub)
    # resume=True resumes the partition before reading.
    again = liftbridge_client.subscribe(
        stream5, start=StartAt.offset(3), stop=StopAt.offset(4), resume=True
    )
    assert offsets(list(again)) == [3, 4]


def test_readonly_partition_ends_the_iteration(liftbridge_client: Client, stream5: str) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.earliest())
    assert offsets(take(sub, 2)) == [0, 1]
    liftbridge_client.set_stream_readonly(stream5)
    assert offsets(list(sub)) == [2, 3, 4]
    # Subscribing to an already read-only partition is finite too.
    assert offsets(list(liftbridge_client.subscribe(stream5, start=StartAt.offset(3)))) == [3, 4]


def test_delete_raises_stream_deleted(liftbridge_client: Client, stream5: str) -> None:
    sub = liftbridge_client.subscribe(stream5, start=StartAt.earliest())
    assert offsets(take(sub, 5)) == [0, 1, 2, 3, 4]
    liftbridge_client.delete_stream(stream5)
    with pytest.raises(lb.StreamDeletedError):
        sub.get(10)


def test_reverse(
    liftbridge_client: Client, liftbridge_server: object, liftbridge_address: str, stream5: str
) -> None:
    installed = getattr(liftbridge_server, "installed", None)
    if installed is None:
        pytest.skip("server version unknown")
    sub = liftbridge_client.subscribe(stream5, start=StartAt.offset(4), reverse=True)
    if installed.supports_reverse:
        assert offsets(list(sub)) == [4, 3, 2, 1, 0]
        return
    # v1.9.0 ignores the field and reads forward: detected at the second message.
    assert offsets(take(sub, 1)) == [4]
    publish_values(liftbridge_address, stream5, 1, start=5)
    with pytest.raises(lb.UnsupportedError, match="does not support reverse"):
        sub.get(10)


# ---------------------------------------------------------------------- cursors


def test_checkpoint_and_resume_from_cursor(liftbridge_client: Client, stream5: str) -> None:
    first = liftbridge_client.subscribe(stream5, start=StartAt.cursor("c1"))  # none: earliest
    assert offsets(take(first, 3)) == [0, 1, 2]
    assert first.checkpoint("c1") == 2
    first.close()
    assert liftbridge_client.fetch_cursor("c1", stream5, 0) == 2
    second = liftbridge_client.subscribe(stream5, start=StartAt.cursor("c1"), stop=StopAt.latest())
    assert offsets(list(second)) == [3, 4]
    empty = liftbridge_client.subscribe(stream5, start=StartAt.earliest())
    assert empty.checkpoint("c2") is None
    # A bad id is refused even when nothing would be stored, not first at a later call.
    with pytest.raises(lb.ConfigurationError, match="cursor_id"):
        empty.checkpoint("")
    with pytest.raises(lb.ArgumentTypeError, match="cursor_id"):
        empty.checkpoint(5)  # type: ignore[arg-type]
    empty.close()
    whole = liftbridge_client.subscribe_stream(stream5)
    with pytest.raises(lb.ConfigurationError, match="cursor_id"):
        whole.checkpoint("a,b")
    whole.close()


def test_a_cursor_past_the_newest_offset_reads_from_the_earliest_with_a_warning(
    liftbridge_client: Client, stream5: str, caplog: pytest.LogCaptureFixture
) -> None:
    # As a stream deleted and created again leaves it (v1.9.0 keeps the cursors): read
    # after it, the subscription would wait for offset 51 and skip 0 ... 50 unsaid.
    liftbridge_client.set_cursor("ahead", stream5, 0, 50)
    with caplog.at_level(logging.WARNING, logger="liftbridge_sync.subscription"):
        sub = liftbridge_client.subscribe(stream5, start=StartAt.cursor("ahead"))
        with sub:
            assert offsets(take(sub, 5)) == [0, 1, 2, 3, 4]
    assert "cursor 'ahead'" in caplog.text and "past the partition's newest offset 4" in caplog.text
    # At the newest offset the cursor is in range: nothing new to read yet.
    liftbridge_client.set_cursor("ahead", stream5, 0, 4)
    caplog.clear()
    with liftbridge_client.subscribe(stream5, start=StartAt.cursor("ahead")) as sub:
        with pytest.raises(TimeoutError):
            sub.get(0.3)
    assert "past the partition" not in caplog.text


# ---------------------------------------------------------------------- whole stream


@pytest.fixture
def stream4p(liftbridge_address: str, new_stream: StreamFactory) -> str:
    """Four partitions; partition p holds 3 + p messages ``p<p>-<i>``."""
    name = new_stream(partitions=4)
    for p in range(4):
        publish(liftbridge_address, name, [f"p{p}-{i}".encode() for i in range(3 + p)], partition=p)
    return name


def by_partition(messages: list[Message]) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for m in messages:
        result.setdefault(m.partition, []).append(m.offset)
    return result


def test_whole_stream_merges_partitions(liftbridge_client: Client, stream4p: str) -> None:
    with liftbridge_client.subscribe_stream(
        stream4p, start=StartAt.earliest(), stop=StopAt.latest()
    ) as sub:
        assert sub.partitions == (0, 1, 2, 3)
        got = list(sub)
    assert by_partition(got) == {p: list(range(3 + p)) for p in range(4)}
    assert all(m.value == f"p{m.partition}-{m.offset}".encode() for m in got)


def test_whole_stream_of_a_stream_created_again_with_more_partitions(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    """The partition count came from this client's cached metadata: after the stream
    was deleted and created again with more partitions (by anyone), ``subscribe_stream``
    read the old count of partitions and never the new ones, without a word."""
    name = new_stream(partitions=2)
    with liftbridge_client.subscribe_stream(name) as before:
        assert before.partitions == (0, 1)
    with Client(liftbridge_address) as other:
        other.delete_stream(name)
        other.create_stream(name, name, partitions=4)
    publish(liftbridge_address, name, [b"late"], partition=3)
    with liftbridge_client.subscribe_stream(
        name, start=StartAt.earliest(), stop=StopAt.latest()
    ) as sub:
        assert sub.partitions == (0, 1, 2, 3)
        assert [(m.partition, m.value) for m in sub] == [(3, b"late")]


def test_whole_stream_get_many_takes_what_is_queued(
    liftbridge_client: Client, stream4p: str
) -> None:
    with liftbridge_client.subscribe_stream(
        stream4p, start=StartAt.earliest(), stop=StopAt.latest()
    ) as sub:
        batches = drain_many(sub, 4)
        got = [m for _, batch in batches for m in batch]
        sizes = [len(batch) for _, batch in batches]
        with pytest.raises(StopIteration):
            sub.get_many(4, timeout=1)
    assert by_partition(got) == {p: list(range(3 + p)) for p in range(4)}
    assert min(sizes) >= 1 and max(sizes) <= 4
    with pytest.raises(lb.ConfigurationError):
        sub.get_many(0)


def test_whole_stream_follows_timeouts_and_close(
    liftbridge_client: Client, liftbridge_address: str, stream4p: str
) -> None:
    sub = liftbridge_client.subscribe_stream(stream4p)  # new only
    names = {t.name for t in threading.enumerate()}
    assert {f"liftbridge-subscribe-{stream4p}-{p}" for p in range(4)} <= names
    with pytest.raises(TimeoutError):
        sub.get(0.1)
    publish(liftbridge_address, stream4p, [b"x"], partition=2)
    publish(liftbridge_address, stream4p, [b"y"], partition=0)
    got = take(sub, 2)
    assert sorted((m.partition, m.offset) for m in got) == [(0, 3), (2, 5)]
    assert sub.last_offsets == {0: 3, 2: 5}
    stored = sub.checkpoint("sc")
    assert stored == {0: 3, 2: 5}
    assert liftbridge_client.fetch_cursor("sc", stream4p, 2) == 5
    closer = threading.Timer(0.1, sub.close)
    closer.start()
    assert list(sub) == []
    closer.join()


def test_whole_stream_iteration_ends_for_a_signal_another_thread_was_given(
    liftbridge_client: Client, stream4p: str, raising_handler: threading.Event
) -> None:
    # The kernel hands a process's SIGINT to any of its threads: one given a partition
    # reader left the main thread asleep in the merged iterator until a message came.
    with liftbridge_client.subscribe_stream(stream4p) as sub:  # new only: nothing comes

        def iterate() -> None:
            for _ in sub:
                pass

        took = signal_another_thread(iterate, unblock=sub.close, what="the iteration")
        raising_handler.set()
        assert took < WAIT_SLICE + 2.0
        with pytest.raises(TimeoutError):  # still usable
            sub.get(0.05)
        assert not sub.closed
    assert sub.closed and not sub.exhausted
    with pytest.raises(StopIteration):
        next(sub)
    assert not sub.exhausted  # ended by close(), not by stops


def test_whole_stream_cursor_resume(liftbridge_client: Client, stream4p: str) -> None:
    liftbridge_client.set_cursor("wc", stream4p, 1, 2)
    liftbridge_client.set_cursor("wc", stream4p, 3, 0)
    sub = liftbridge_client.subscribe_stream(
        stream4p, start=StartAt.cursor("wc"), stop=StopAt.latest()
    )
    assert not sub.exhausted  # not before its end is delivered
    assert by_partition(list(sub)) == {0: [0, 1, 2], 1: [3], 2: [0, 1, 2, 3, 4], 3: [1, 2, 3, 4, 5]}
    # Ended by the stops, as a partition's subscription says (sub.exhausted).
    assert sub.exhausted and not sub.closed
    sub.close()
    assert sub.exhausted and sub.closed


def test_whole_stream_raises_a_partition_error(liftbridge_client: Client, stream4p: str) -> None:
    sub = liftbridge_client.subscribe_stream(stream4p, start=StartAt.earliest())
    assert len(take(sub, 3 + 4 + 5 + 6)) == 18
    liftbridge_client.pause_stream(stream4p, partitions=[2])
    with pytest.raises(lb.PartitionPausedError):
        sub.get(10)
    with pytest.raises(StopIteration):
        sub.get(0)
    assert sub.closed and not sub.exhausted  # ended by the error, not by its stops


def test_whole_stream_of_a_missing_stream(liftbridge_client: Client) -> None:
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.subscribe_stream("no-such-stream-either")


# ---------------------------------------------------------------------- server restart


@pytest.fixture(scope="module")
def restart_server() -> Iterator[LiftbridgeServer]:
    """A server of our own: restarting it must not disturb other tests."""
    with LiftbridgeServer() as server:
        yield server


@pytest.fixture
def restart_client(restart_server: LiftbridgeServer) -> Iterator[Client]:
    # Reconnect quickly once the server is back (gRPC's default backoff starts at 1 s).
    fast = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 300))
    with Client(restart_server.address, grpc_options=fast) as client:
        yield client


def test_server_restart_mid_iteration_resumes_without_gap_or_duplicate(
    restart_server: LiftbridgeServer, restart_client: Client
) -> None:
    address = restart_server.address
    restart_client.create_stream("restart-a", "restart-a")
    restart_client.create_stream("restart-b", "restart-b")
    publish_values(address, "restart-a", 10)
    received = restart_client.subscribe("restart-a", start=StartAt.earliest())
    nothing_yet = restart_client.subscribe("restart-b")  # new only, pinned at offset 0
    assert offsets(take(received, 6)) == list(range(6))
    restart_server.restart()
    # A restarted single node only serves messages up to its high watermark, which it
    # re-learns with the next commit: publish to move it.
    publish_values(address, "restart-a", 5, start=10, ack_policy=api_pb2.ALL)
    publish_values(address, "restart-b", 2, ack_policy=api_pb2.ALL)
    rest = take(received, 9, timeout=30)
    assert offsets(rest) == list(range(6, 15))
    assert [m.value for m in rest] == [f"m{i}".encode() for i in range(6, 15)]
    assert offsets(take(nothing_yet, 2, timeout=30)) == [0, 1]
    received.close()
    nothing_yet.close()


def test_get_timeout_while_the_server_is_down(
    restart_server: LiftbridgeServer, restart_client: Client
) -> None:
    restart_client.create_stream("down", "down")
    publish_values(restart_server.address, "down", 2)
    sub = restart_client.subscribe("down", start=StartAt.earliest())
    assert offsets(take(sub, 2)) == [0, 1]
    restart_server.stop()
    try:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                sub.get(0.3)
            assert time.monotonic() - started < 2.0
    finally:
        restart_server.start()
    # Through the client, which waits out the partition's recovery after the restart
    # (a raw PublishAsync call sent then got no ack within its 20 s in a CI run).
    for i in (2, 3):
        restart_client.publish("down", b"m%d" % i, partition=0, ack_policy=AckPolicy.ALL)
    assert [m.value for m in take(sub, 2, timeout=30)] == [b"m2", b"m3"]
    sub.close()


def test_a_read_blocked_across_a_restart_is_not_a_deletion(
    restart_server: LiftbridgeServer, restart_client: Client
) -> None:
    """NOT_FOUND while the restarted server recovers its partitions is not a deletion."""
    restart_client.create_stream("blocked", "blocked")
    publish_values(restart_server.address, "blocked", 3)
    sub = restart_client.subscribe("blocked", start=StartAt.earliest())
    assert offsets(take(sub, 3)) == [0, 1, 2]
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(_next_or_error(sub)))
    reader.start()  # blocks in next(): nothing more is stored yet
    for _ in range(2):
        restart_server.restart()
    for i in (3, 4):  # through the client, which waits out the recovery (see above)
        restart_client.publish("blocked", b"m%d" % i, partition=0, ack_policy=AckPolicy.ALL)
    reader.join(60)
    assert not reader.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], Message), outcome
    assert (outcome[0].offset, outcome[0].value) == (3, b"m3")
    assert [m.offset for m in take(sub, 1, timeout=30)] == [4]
    sub.close()


def test_a_deleted_stream_is_confirmed_and_reported(
    restart_server: LiftbridgeServer, restart_client: Client
) -> None:
    restart_client.create_stream("doomed", "doomed")
    sub = restart_client.subscribe("doomed", start=StartAt.earliest())
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(_next_or_error(sub)))
    reader.start()
    restart_client.delete_stream("doomed")
    reader.join(60)
    assert not reader.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], lb.StreamDeletedError), outcome
    sub.close()


def test_subscribing_to_a_missing_stream_says_so(liftbridge_client: Client) -> None:
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.subscribe("missing-" + uuid.uuid4().hex[:8])


def _next_or_error(sub: Subscription) -> object:
    try:
        return next(sub)
    except Exception as exc:  # the test inspects what the reader saw
        return exc


def test_a_range_read_after_a_restart_says_why_it_waits_and_ends_once_committed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a restart v1.9.0 serves a partition only up to the high watermark it
    recovered (checkpointed every 5 s, not at shutdown) until it commits something new:
    a read to ``StopAt.latest()`` of messages stored before the restart waits. It says
    why after ``rpc_timeout`` of silence, and ends with every message once anything is
    committed to the partition."""
    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            client.create_stream("stale", "stale")
            for i in range(10):
                client.publish("stale", b"m%d" % i)
        # Within 5 s of the stream's creation: its log has checkpointed no watermark yet.
        server.restart()
        with Client(server.address, rpc_timeout=1.0) as client:
            info = client.fetch_partition_metadata("stale", 0)
            assert (info.high_watermark, info.newest_offset) == (-1, 9)  # the server's doing
            got: list[Message] = []
            with caplog.at_level(logging.WARNING, logger="liftbridge_sync"):
                sub = client.subscribe("stale", start=StartAt.earliest(), stop=StopAt.latest())
                reader = threading.Thread(target=lambda: got.extend(sub))
                reader.start()
                wait_until(
                    lambda: any("commits a new message" in r.getMessage() for r in caplog.records),
                    30,
                    "the warning",
                )
                told = [r for r in caplog.records if "commits a new message" in r.getMessage()]
                assert "offsets up to 9 are written" in told[0].getMessage()
                assert "committed only up to -1" in told[0].getMessage()
                client.publish("stale", b"new")
                reader.join(30)
                assert not reader.is_alive()
                sub.close()
            assert [(m.offset, m.value) for m in got] == [(i, b"m%d" % i) for i in range(10)]
            told = [r for r in caplog.records if "commits a new message" in r.getMessage()]
            assert len(told) == 1  # once per subscription, however long it waited


@pytest.mark.parametrize("in_a_cycle", [False, True], ids=["refcount", "collector"])
def test_a_whole_stream_subscription_dropped_without_close_ends_its_readers(
    liftbridge_client: Client,
    stream4p: str,
    caplog: pytest.LogCaptureFixture,
    in_a_cycle: bool,
) -> None:
    # In a cycle it is freed by the collector, which clears the weak references to it
    # (the client's included) before its __del__ puts it back.
    held = [liftbridge_client.subscribe_stream(stream4p)]  # new only: the readers wait
    readers = [
        t for t in threading.enumerate() if t.name.startswith(f"liftbridge-subscribe-{stream4p}-")
    ]
    assert len(readers) == 4
    dropped = weakref.ref(held[0])
    if in_a_cycle:
        held[0].cycle = [held[0]]  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="liftbridge_sync.subscription"):
        held.clear()  # without close()
        gc.collect()
        wait_until(lambda: not any(t.is_alive() for t in readers), 10, "its readers ended")
        wait_until(lambda: gc.collect() >= 0 and dropped() is None, 10, "collected")
    assert "dropped without close(): closing" in caplog.text


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_second_thread_reading_a_subscription_is_told_not_served(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    """Two threads iterating one subscription lost messages without a word (h2: 16-261
    of 20,000) or died on grpcio's bare ValueError. The second read is now refused."""
    name = new_stream()
    with Client(liftbridge_address, subscribe_transport=transport) as client:
        sub = client.subscribe(name, start=StartAt.earliest())
        got: list[int] = []
        reader = threading.Thread(target=lambda: got.append(sub.get(30).offset))
        reader.start()
        wait_until(sub._reading.locked, 10, "the first thread to wait in its read")
        with pytest.raises(lb.WrongThreadError, match="is being read by another thread"):
            sub.get(0.1)
        client.publish(name, b"one")
        reader.join(30)
        assert got == [0]
        # One thread at a time is fine, whichever it is.
        client.publish(name, b"two")
        assert sub.get(10).offset == 1
        sub.close()


def test_a_whole_stream_time_delta_start_is_one_instant_for_every_partition(
    liftbridge_client: Client, new_stream: StreamFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each partition resolved "now - delta" as it was opened, milliseconds apart: a
    message published in between was read on one partition and not on another."""
    from liftbridge_sync.subscription import opening

    name = new_stream(partitions=3)
    for partition in range(3):
        liftbridge_client.publish(name, b"x", partition=partition)
    looked_up: list[int] = []
    original = opening.first_offset_since

    def recording(*args: object, **kwargs: object) -> int:
        looked_up.append(args[3])  # type: ignore[arg-type]  # (core, stream, partition, since)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(opening, "first_offset_since", recording)
    with liftbridge_client.subscribe_stream(
        name, start=StartAt.time_delta(60), stop=StopAt.latest()
    ) as whole:
        assert sorted(m.partition for m in whole) == [0, 1, 2]
    assert len(looked_up) == 3 and len(set(looked_up)) == 1, looked_up
