"""A ``publish()`` caller reading its own ack off the ``"h2"`` connection
(:class:`~liftbridge_sync._transport.h2.reading.CallerReads`), against the fake broker.

The caller takes the socket from the I/O thread while it waits; these tests check that
it does, that everybody else's acks still resolve in order meanwhile, and that what the
I/O thread would have noticed (a window the broker opened, the stream's end) is acted
on at once rather than when the caller gives the socket back.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2 import connection, reading, writing
from liftbridge_sync._transport.h2.framing import FrameError
from liftbridge_sync._wire.publish_codec import Refusal
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY
from tests.publish_streams import live_h2_stream
from tests.waiting import wait_until


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=4)) as server:
        yield server


def _client(fake: FakeBroker, **options: Any) -> Client:
    return Client([fake.address], retry=FAST_RETRY, publish_transport="h2", **options)


def _first_time(actions: dict[bytes, str]) -> Any:
    """A publish script: ``actions[value]`` the first time a value arrives, then acks."""
    seen: dict[bytes, int] = {}

    def script(req: api_pb2.PublishRequest, n: int) -> object:
        seen[req.value] = seen.get(req.value, 0) + 1
        return actions.get(req.value, "ack") if seen[req.value] == 1 else "ack"

    return script


def _silent_caller(
    client: Client, stream: connection.H2PublishStream, timeout: float | None = None
) -> tuple[threading.Thread, list[Any]]:
    """A thread publishing ``b"silent"``, started once it reads the connection; what its
    ``publish`` returned or raised (a ``LiftbridgeError``) goes into the list."""
    outcome: list[Any] = []

    def publish() -> None:
        try:
            outcome.append(client.publish("s", b"silent", timeout=timeout))
        except lb.LiftbridgeError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=publish, name="test-silent")
    thread.start()
    wait_until(lambda: stream._watch.reading_here, what="the silent caller to read")
    return thread, outcome


def _resent_on_a_new_stream(
    fake: FakeBroker, other: Any, reader: threading.Thread, outcome: list[Any]
) -> None:
    """Both the other publish and the silent caller's are answered within seconds (not
    at their 20 s ack timeout), on a second stream."""
    assert other.result(timeout=5.0) is not None
    reader.join(timeout=5.0)
    assert not reader.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], lb.Ack)
    assert fake.streams_opened == 2


def _spy_hand_overs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that hand responses over, in order."""
    names: list[str] = []
    real = connection.H2PublishStream._hand_over

    def hand_over(
        self: connection.H2PublishStream, responses: list[Any], on_io_thread: bool = True
    ) -> None:
        names.append(threading.current_thread().name)
        real(self, responses, on_io_thread)

    monkeypatch.setattr(connection.H2PublishStream, "_hand_over", hand_over)
    return names


@pytest.mark.parametrize(
    "extra",
    [{}, {"key": b"k", "headers": {"h": b"v"}}],
    ids=["plain value", "key and headers"],
)
def test_publish_reads_its_own_ack_on_its_thread(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]
) -> None:
    handed_over_on = _spy_hand_overs(monkeypatch)
    written_here = 0
    real_write_here = writing.Writer._write_here

    def write_here(self: writing.Writer, direct: bool = False) -> None:
        nonlocal written_here
        written_here += direct
        real_write_here(self, direct)

    monkeypatch.setattr(writing.Writer, "_write_here", write_here)
    # Acks 2 ms late (the real broker takes about 0.2 ms): the caller is certain to be
    # waiting by then, however slowly this machine runs it.
    fake.publish_script = lambda req, n: ("delay", 0.002)
    with _client(fake) as client:
        offsets = [client.publish("s", b"m%d" % i, **extra).offset for i in range(30)]  # type: ignore[union-attr]
        stream = live_h2_stream(client)
        assert not stream._watch.reading_here
        stream._selector.get_key(stream._sock)  # the I/O thread watches the socket again
    assert offsets == list(range(30))
    # The first publish connects the stream (it goes through the I/O thread).
    assert written_here >= 20  # the request written on the caller's thread
    here = handed_over_on.count(threading.current_thread().name)
    assert here >= 20, handed_over_on  # and its ack read there


def test_publish_leaves_reading_to_the_io_thread_while_others_wait(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With other acks due, one reader serving everybody would only move the hand-off
    # (and its thread switches) to a caller: the I/O thread keeps reading.
    handed_over_on = _spy_hand_overs(monkeypatch)
    fake.publish_script = lambda req, n: "drop" if req.value.startswith(b"lost") else "ack"
    with _client(fake, ack_timeout=60.0) as client:
        client.publish("s", b"first")
        lost = [client.publish_async("s", b"lost%d" % i) for i in range(5)]
        wait_until(lambda: len(fake.received) == 6, what="the lost publishes to arrive")
        del handed_over_on[:]
        acks = [client.publish("s", b"m%d" % i) for i in range(10)]
        assert not any(f.done() for f in lost)
        client.close(timeout=0.2)
    assert [a.offset for a in acks] == list(range(1, 11))  # type: ignore[union-attr]
    assert handed_over_on == ["liftbridge-publish-io"] * 10


def test_other_threads_acks_resolve_in_order_while_a_caller_reads(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reading, "READ_HERE_FOR", 4.0)
    handed_over_on = _spy_hand_overs(monkeypatch)
    fake.publish_script = lambda req, n: "drop" if req.value == b"silent" else "ack"
    # Without re-sends: on a loaded machine the fake's partition 1 could look idle long
    # enough to be taken for silent, and 3,000 in flight re-sent (stored twice).
    with _client(fake, max_in_flight=500, ack_timeout=30.0, resend_after=None) as client:
        client.publish("s", b"first")
        reader, outcome = _silent_caller(client, live_h2_stream(client), timeout=2.0)
        pipelined = [client.publish_async("s", b"p%d" % i, partition=1) for i in range(3000)]
        offsets = [f.result(timeout=30).offset for f in pipelined]  # type: ignore[union-attr]
        reader.join(timeout=10)
    assert offsets == list(range(3000))
    assert "test-silent" in handed_over_on  # the caller handed the pipelined acks over
    assert len(outcome) == 1 and isinstance(outcome[0], lb.AckTimeoutError)


def test_a_window_opened_while_a_caller_reads_is_used_at_once(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A caller reads for an ack that never comes; meanwhile 9 MiB of publishes need
    # WINDOW_UPDATEs (the fake's windows are 4 MiB), which that caller reads: it must
    # send what they let through, or the publishes stall until it gives the socket back.
    monkeypatch.setattr(reading, "READ_HERE_FOR", 4.0)
    fake.publish_script = lambda req, n: "drop" if req.value == b"silent" else "ack"
    with _client(fake, ack_timeout=30.0) as client:
        client.publish("s", b"first")
        stream = live_h2_stream(client)
        reader, outcome = _silent_caller(client, stream, timeout=2.0)
        big = [client.publish_async("s", bytes([i]) * (3 << 20)) for i in range(3)]
        acks = [f.result(timeout=3.0) for f in big]  # the caller reads for 4 s
        assert [a.offset for a in acks] == [1, 2, 3]  # type: ignore[union-attr]
        assert stream._watch.reading_here, "the caller stopped reading early: nothing was shown"
        reader.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], lb.AckTimeoutError)


def test_the_stream_ending_while_a_caller_reads_is_acted_on_at_once(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller reads the broker's UNAVAILABLE trailers; the I/O thread, not watching
    # the socket, must still end the stream at once so the publisher re-sends on a
    # new one (not when the 20 s ack timeout probes the connection).
    monkeypatch.setattr(reading, "READ_HERE_FOR", 30.0)
    fake.publish_script = _first_time({b"silent": "drop", b"abort": "abort"})
    with _client(fake, ack_timeout=20.0) as client:
        client.publish("s", b"first")
        reader, outcome = _silent_caller(client, live_h2_stream(client))
        aborted = client.publish_async("s", b"abort")
        _resent_on_a_new_stream(fake, aborted, reader, outcome)


def test_a_broken_read_on_the_callers_thread_ends_the_stream_at_once(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the caller's read ran into (here: garbage) must reach the I/O thread, which
    # ends the stream so the publisher re-sends on a new one, not the 20 s ack timeout.
    # (The caller also wakes the I/O thread for it; the fake's own PINGs would too, so
    # this test shows the outcome, not which of the two woke it.)
    monkeypatch.setattr(reading, "READ_HERE_FOR", 30.0)
    fake.publish_script = _first_time({b"silent": "drop"})
    with _client(fake, ack_timeout=20.0) as client:
        client.publish("s", b"first")
        stream = live_h2_stream(client)
        real_read = stream._reads._read

        def garbage_on_the_callers_thread() -> None:
            real_read()  # takes the bytes off the socket, as a real failed read does
            if threading.current_thread().name == "test-silent":
                raise FrameError("scripted: garbage from the broker")

        monkeypatch.setattr(stream._reads, "_read", garbage_on_the_callers_thread)
        reader, outcome = _silent_caller(client, stream)
        other = client.publish_async("s", b"other")  # its ack is what the caller reads
        _resent_on_a_new_stream(fake, other, reader, outcome)


def test_without_poll_the_io_thread_reads(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A platform without poll() (Windows): publish() works as before, read by the I/O thread.
    monkeypatch.delattr(select, "poll")
    handed_over_on = _spy_hand_overs(monkeypatch)
    with _client(fake) as client:
        acks = [client.publish("s", b"m%d" % i) for i in range(5)]
    assert [a.offset for a in acks] == list(range(5))  # type: ignore[union-attr]
    assert handed_over_on == ["liftbridge-publish-io"] * 5


def test_a_publish_without_an_ack_never_reads(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its future is resolved by the publisher thread once written: a caller polling
    # the socket would not notice until something arrived (up to READ_HERE_FOR later).
    reads: list[str] = []
    real = reading.CallerReads._read_until

    def read_until(self: reading.CallerReads, done: Any, deadline: float) -> bool:
        reads.append(threading.current_thread().name)
        return real(self, done, deadline)

    monkeypatch.setattr(reading.CallerReads, "_read_until", read_until)
    with _client(fake) as client:
        client.publish("s", b"first")
        del reads[:]
        for i in range(10):
            assert client.publish("s", b"n%d" % i, ack_policy=lb.AckPolicy.NONE) is None
        assert reads == []
        # The control: an acked publish does read, when its ack is the only one due and
        # the I/O thread has not read it first (a busy machine may make the latter win
        # a few times).
        acked = 0
        while not reads and acked < 50:
            client.publish("s", b"acked")
            acked += 1
        assert reads == [threading.current_thread().name]
    wait_until(lambda: len(fake.received) == 11 + acked, what="the unacked publishes to arrive")


def test_a_refusal_read_by_the_caller_is_not_held_back(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refusal is resolved by the publisher thread, not by the reading caller: once
    # its answer is in, the caller stops reading and waits for that, rather than
    # polling on until something else arrives or READ_HERE_FOR ends.
    monkeypatch.setattr(reading, "READ_HERE_FOR", 60.0)
    readonly = api_pb2.PublishAsyncError.READONLY
    fake.publish_script = lambda req, n: ("error", readonly, "no") if req.value == b"r" else "ack"
    answered = threading.Event()
    polled_after: list[float] = []
    real_hand_over = connection.H2PublishStream._hand_over

    def hand_over(
        self: connection.H2PublishStream, responses: list[Any], on_io_thread: bool = True
    ) -> None:
        real_hand_over(self, responses, on_io_thread)
        if any(isinstance(r, Refusal) and r.async_code is not None for r in responses):
            answered.set()

    class Poll:
        def __init__(self, real: Any) -> None:
            self._real = real

        def poll(self, timeout: float) -> list[tuple[int, int]]:
            if answered.is_set() and threading.current_thread().name == "test-refused":
                polled_after.append(timeout)
            return self._real.poll(timeout)  # type: ignore[no-any-return]

    monkeypatch.setattr(connection.H2PublishStream, "_hand_over", hand_over)
    with _client(fake) as client:
        client.publish("s", b"first")
        stream = live_h2_stream(client)
        monkeypatch.setattr(stream._reads, "_here_poll", Poll(stream._reads._here_poll))
        raised: list[BaseException] = []

        def refused() -> None:
            try:
                client.publish("s", b"r")
            except lb.LiftbridgeError as exc:
                raised.append(exc)

        thread = threading.Thread(target=refused, name="test-refused")
        thread.start()
        thread.join(timeout=10.0)
        assert not thread.is_alive()
    assert answered.is_set(), "the refusal was not read on the caller's thread"
    assert polled_after == [], "the caller kept reading after its answer came"
    assert len(raised) == 1 and isinstance(raised[0], lb.ReadonlyPartitionError)
