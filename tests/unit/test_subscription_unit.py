"""Pure parts of subscriptions: request building, the timer thread, the merge buffer."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from liftbridge_sync import Client, ClientClosedError, InternalThreadError, StartAt, StopAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.scheduler import THREAD_NAME, Scheduler
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.models import Message
from liftbridge_sync.subscription import opening
from liftbridge_sync.subscription.merging import Mailbox as _Mailbox
from liftbridge_sync.subscription.opening import build_subscribe_request as _build_request
from tests.messages import make_message

# ---------------------------------------------------------------------- requests


@dataclass
class _Meta:
    newest_offset: int
    high_watermark: int
    paused: bool = False


class FakeClient:
    """Answers the two look-ups that pinning needs, and counts them."""

    def __init__(self, newest: int = -1, cursor: int = -1) -> None:
        self.newest = newest
        self.cursor = cursor
        self.calls: list[str] = []

    def fetch_partition_metadata(self, stream: str, partition: int) -> _Meta:
        self.calls.append("metadata")
        return _Meta(self.newest, self.newest)

    def fetch_cursor(self, cursor_id: str, stream: str, partition: int) -> int:
        self.calls.append(f"cursor {cursor_id} {stream} {partition}")
        return self.cursor


@pytest.fixture(autouse=True)
def _look_ups_of_the_fake_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinning looks offsets and cursors up through the fake client, not over RPCs."""
    # The fake client has nothing to abort: an ``abort`` passed along is dropped.
    leader = SimpleNamespace(
        fetch_partition_metadata=lambda c, *a, abort=None: c.fetch_partition_metadata(*a)
    )
    cursors = SimpleNamespace(fetch_cursor=lambda c, *a: c.fetch_cursor(*a))
    monkeypatch.setattr(opening, "leader", leader)
    monkeypatch.setattr(opening, "cursors", cursors)


def build(
    start: StartAt,
    stop: StopAt | None = None,
    *,
    client: FakeClient | None = None,
    reverse: bool = False,
) -> api_pb2.SubscribeRequest | None:
    return _build_request(
        cast(ClientCore, client or FakeClient()),
        "s",
        2,
        start,
        stop,
        read_isr_replica=True,
        resume=True,
        reverse=reverse,
    )


def test_fixed_positions_map_to_fields_without_lookups() -> None:
    client = FakeClient()
    request = build(StartAt.earliest(), StopAt.offset(9), client=client)
    assert request is not None
    assert (request.stream, request.partition) == ("s", 2)
    assert request.readISRReplica and request.resume and not request.reverse
    assert request.startPosition == api_pb2.EARLIEST
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 9)
    request = build(StartAt.offset(5), StopAt.offset(5), client=client)
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 5)
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 5)
    assert client.calls == []


def test_stop_timestamp_is_pinned_to_the_newest_offset() -> None:
    """The server's own lookup may name an offset compaction removed (or fail); the
    subscription checks the time per message and the request stops at the newest."""
    client = FakeClient(newest=30)
    request = build(StartAt.offset(5), StopAt.timestamp(77), client=client)
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 5)
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 30)
    assert request.stopTimestamp == 0
    assert client.calls == ["metadata"]
    assert build(StartAt.earliest(), StopAt.timestamp(77), client=FakeClient(newest=-1)) is None


@pytest.mark.parametrize(
    ("start", "stop", "newest"),
    [
        (StartAt.offset(4), StopAt.offset(3), 9),  # stop before start
        (StartAt.offset(10), StopAt.latest(), 9),  # a start past the end
        (StartAt.new_only(), StopAt.latest(), 9),
        (StartAt.new_only(), StopAt.offset(9), 9),
        (StartAt.new_only(), StopAt.timestamp(10**18), 9),
        (StartAt.timestamp(200), StopAt.timestamp(100), 9),  # stop time before start time
        (StartAt.cursor("c"), StopAt.offset(6), 9),  # cursor 6: resumes at 7
        (StartAt.earliest(), StopAt.latest(), -1),  # empty partition
    ],
)
def test_empty_ranges_are_decided_without_subscribing(
    start: StartAt, stop: StopAt, newest: int
) -> None:
    assert build(start, stop, client=FakeClient(newest=newest, cursor=6)) is None


def test_a_stop_in_the_future_is_left_to_wait_for() -> None:
    """Offsets not written yet are not an empty range: the subscription waits for them."""
    request = build(StartAt.offset(20), StopAt.offset(25), client=FakeClient(newest=9))
    assert request is not None
    assert (request.startOffset, request.stopOffset) == (20, 25)
    request = build(StartAt.latest(), StopAt.latest(), client=FakeClient(newest=9))
    assert request is not None
    assert (request.startOffset, request.stopOffset) == (9, 9)


def test_timestamps_are_unix_nanoseconds() -> None:
    """As a reverse read sends them (a forward read pins them to offsets, below)."""
    when = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    request = build(StartAt.timestamp(when), reverse=True)
    assert request is not None
    assert request.startPosition == api_pb2.TIMESTAMP
    assert request.startTimestamp == int(when.timestamp()) * 10**9 + 678901000
    before = time.time_ns()
    request = build(StartAt.time_delta(1.5), reverse=True)
    assert request is not None
    assert before - 1_500_000_000 <= request.startTimestamp <= time.time_ns() - 1_500_000_000


def test_a_forward_start_time_is_pinned_to_the_first_offset_at_or_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[int, int]] = []

    def first_offset_since(
        core: object, stream: str, partition: int, since: int, committed: int, *, resume: bool
    ) -> int:
        asked.append((since, committed))
        return 7

    monkeypatch.setattr(
        "liftbridge_sync.subscription.opening.first_offset_since", first_offset_since
    )
    client = FakeClient(newest=9)
    request = build(StartAt.timestamp(1_000), StopAt.latest(), client=client)
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 7)
    assert request.startTimestamp == 0  # nothing stray on the wire
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 9)
    assert asked == [(1_000, 9)] and client.calls == ["metadata"]
    # A stop time before the start time is empty without a look-up.
    assert build(StartAt.timestamp(200), StopAt.timestamp(100), client=client) is None
    assert len(asked) == 1 and client.calls == ["metadata"]


def test_new_only_and_latest_are_pinned_to_offsets() -> None:
    request = build(StartAt.new_only(), client=FakeClient(newest=41))
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 42)
    request = build(StartAt.latest(), client=FakeClient(newest=41))
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 41)
    empty = FakeClient(newest=-1)
    request = build(StartAt.latest(), client=empty)
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 0)


def test_stop_latest_is_pinned_with_one_lookup() -> None:
    client = FakeClient(newest=9)
    request = build(StartAt.earliest(), StopAt.latest(), client=client)
    assert request is not None
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 9)
    assert client.calls == ["metadata"]
    assert build(StartAt.earliest(), StopAt.latest(), client=FakeClient(newest=-1)) is None


def test_reverse_positions_are_left_to_the_server() -> None:
    client = FakeClient(newest=9)
    request = build(StartAt.latest(), StopAt.latest(), client=client, reverse=True)
    assert request is not None
    assert request.reverse
    assert request.startPosition == api_pb2.LATEST
    assert request.stopPosition == api_pb2.STOP_LATEST
    request = build(StartAt.new_only(), client=client, reverse=True)
    assert request is not None
    assert request.startPosition == api_pb2.NEW_ONLY
    assert client.calls == []


def test_cursor_start_resumes_after_the_stored_offset() -> None:
    client = FakeClient(newest=9, cursor=6)
    request = build(StartAt.cursor("c"), client=client)
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 7)
    assert client.calls == ["cursor c s 2", "metadata"]
    request = build(StartAt.cursor("c"), client=FakeClient(newest=6, cursor=6))
    assert request is not None
    assert (request.startPosition, request.startOffset) == (api_pb2.OFFSET, 7)
    request = build(StartAt.cursor("c"), client=FakeClient(cursor=-1))
    assert request is not None
    assert request.startPosition == api_pb2.EARLIEST


def test_a_cursor_past_the_newest_offset_counts_as_none() -> None:
    # What a stream deleted and created again leaves: reading after it would skip.
    request = build(StartAt.cursor("c"), client=FakeClient(newest=3, cursor=6))
    assert request is not None
    assert request.startPosition == api_pb2.EARLIEST
    request = build(StartAt.cursor("c"), client=FakeClient(newest=-1, cursor=0))
    assert request is not None
    assert request.startPosition == api_pb2.EARLIEST


# ---------------------------------------------------------------------- scheduler


def _timer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_scheduler_starts_lazily_runs_in_order_and_joins_on_close() -> None:
    before = len(_timer_threads())
    scheduler = Scheduler()
    assert len(_timer_threads()) == before
    ran: list[str] = []
    done = threading.Event()

    def late() -> None:
        ran.append("late")
        done.set()

    scheduler.call_later(0.5, late)
    scheduler.call_later(0.02, lambda: ran.append("early"))
    cancelled = scheduler.call_later(0.01, lambda: ran.append("cancelled"))
    assert cancelled.cancel()
    thread = _timer_threads()[-1]
    assert thread.daemon
    assert done.wait(5)
    assert ran == ["early", "late"]
    scheduler.close()
    assert not thread.is_alive()
    with pytest.raises(ClientClosedError):
        scheduler.call_later(0, lambda: None)
    scheduler.close()  # idempotent


def test_scheduler_marks_fired_handles() -> None:
    scheduler = Scheduler()
    fired = threading.Event()
    handle = scheduler.call_later(0, fired.set)
    assert fired.wait(5)
    assert handle.fired
    assert not handle.cancel()
    scheduler.close()


def test_a_failing_callback_does_not_stop_the_other_timeouts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = Scheduler()

    def broken() -> None:
        raise RuntimeError("bug in a callback")

    fired = threading.Event()
    scheduler.call_later(0, broken)
    scheduler.call_later(0.01, fired.set)
    try:
        assert fired.wait(5)
        assert "a timer callback failed" in caplog.text
    finally:
        scheduler.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_timer_thread_is_reported_not_hidden() -> None:
    scheduler = Scheduler()
    # Only a BaseException can end the thread now; that stands for any bug.
    scheduler.call_later(0, lambda: (_ for _ in ()).throw(SystemExit()))
    thread = next(t for t in threading.enumerate() if t.name == THREAD_NAME)
    thread.join(5)
    assert not thread.is_alive()
    try:
        with pytest.raises(InternalThreadError, match="liftbridge-timer thread died"):
            scheduler.call_later(1, lambda: None)
    finally:
        scheduler.close()


def test_a_cancelled_timer_lets_go_of_its_callback_and_leaves_the_heap() -> None:
    # A call cancelled by a timer is held by its callback: a cancelled timer that kept
    # it until its deadline (rpc_timeout) kept every closed call, with its buffers.
    class Call:
        def cancel(self) -> None:
            raise AssertionError("a cancelled timer ran")

    scheduler = Scheduler()
    try:
        call = Call()
        gone = weakref.ref(call)
        scheduler.call_later(30, call.cancel).cancel()
        del call
        gc.collect()
        assert gone() is None
        for _ in range(10_000):
            scheduler.call_later(30, lambda: None).cancel()
        assert len(scheduler._heap) <= 512
    finally:
        scheduler.close()


def test_close_drops_pending_callbacks() -> None:
    scheduler = Scheduler()
    ran: list[int] = []
    scheduler.call_later(30, lambda: ran.append(1))
    started = time.monotonic()
    scheduler.close()
    assert time.monotonic() - started < 1
    assert ran == []


def test_one_scheduler_per_client_closed_with_the_client() -> None:
    client = Client("127.0.0.1:1")  # never connects
    scheduler = client._core.scheduler()
    assert client._core.scheduler() is scheduler
    other = Client("127.0.0.1:1")
    assert other._core.scheduler() is not scheduler
    scheduler.call_later(30, lambda: None)
    thread = _timer_threads()[-1]
    client.close()
    other.close()
    assert not thread.is_alive()
    with pytest.raises(ClientClosedError):
        client._core.scheduler().call_later(0, lambda: None)
    closed = Client("127.0.0.1:1")
    closed.close()
    with pytest.raises(ClientClosedError):
        closed._core.scheduler()  # a new scheduler is never attached to a closed client


# ---------------------------------------------------------------------- merge buffer


def _get(box: _Mailbox, timeout: float | None) -> Message | BaseException:
    """The next item, taken off the mailbox as the subscription takes it."""
    taken = box.peek(1, timeout)
    box.drop(taken)
    return taken[0]


def _msg(offset: int, partition: int = 0) -> Message:
    return make_message(offset, partition=partition, subject="s")


def test_mailbox_is_fifo_and_ends_when_every_producer_is_done() -> None:
    box = _Mailbox(capacity=4, producers=2)
    assert box.put(_msg(0)) and box.put(_msg(1))
    box.producer_done()
    assert cast(Message, _get(box, 0)).offset == 0
    assert cast(Message, _get(box, 0)).offset == 1
    with pytest.raises(TimeoutError):
        _get(box, 0.01)
    box.producer_done()
    with pytest.raises(StopIteration):
        _get(box, None)


def test_mailbox_bounds_messages_but_not_errors() -> None:
    box = _Mailbox(capacity=1, producers=1)
    assert box.put(_msg(0))
    error = RuntimeError("terminal")
    assert box.put(error)  # does not block although full
    blocked_put: list[bool] = []
    producer = threading.Thread(target=lambda: blocked_put.append(box.put(_msg(1))))
    producer.start()
    assert cast(Message, _get(box, 1)).offset == 0
    assert _get(box, 1) is error
    producer.join(5)
    assert blocked_put == [True]
    assert cast(Message, _get(box, 1)).offset == 1


def _sized(offset: int, size: int) -> Message:
    return Message.from_proto(api_pb2.Message(offset=offset, value=b"x" * size))


def test_mailbox_bounds_bytes_too_but_takes_a_big_message_alone() -> None:
    box = _Mailbox(capacity=1024, producers=1, max_bytes=1000)
    assert box.put(_sized(0, 600))
    put_done = threading.Event()

    def produce() -> None:
        box.put(_sized(1, 600))  # 1200 bytes with the first: waits for room
        put_done.set()
        box.put(_sized(2, 5000))  # bigger than the whole budget: taken once empty

    producer = threading.Thread(target=produce)
    producer.start()
    assert not put_done.wait(0.2)  # two messages by count, but not by bytes
    assert cast(Message, _get(box, 1)).offset == 0
    assert put_done.wait(5)
    assert cast(Message, _get(box, 1)).offset == 1
    producer.join(5)
    assert not producer.is_alive()
    assert [m.offset for m in cast(list[Message], box.peek(5, 1))] == [2]


def test_mailbox_close_releases_blocked_producers_and_consumers() -> None:
    box = _Mailbox(capacity=1, producers=1)
    assert box.put(_msg(0))
    results: list[Any] = []
    producer = threading.Thread(target=lambda: results.append(box.put(_msg(1))))
    producer.start()
    box.close()
    producer.join(5)
    assert results == [False]
    with pytest.raises(StopIteration):
        _get(box, None)


def test_a_range_reads_silence_counts_only_the_time_spent_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The silence that ends a range read (``rpc_timeout`` without a message) ran on
    the wall clock from the first empty read: a caller away longer than that came
    back to a read cancelled at once, whose socket still held the range."""
    from liftbridge_sync.subscription import read_failures

    now = [100.0]
    monkeypatch.setattr(read_failures, "time", SimpleNamespace(monotonic=lambda: now[0]))
    conn = SimpleNamespace(
        target=SimpleNamespace(stop_offset=9),
        core=SimpleNamespace(options=SimpleNamespace(rpc_timeout=1.0)),
    )
    failures = read_failures.ReadFailures(conn)  # type: ignore[arg-type]
    assert failures.idle_deadline() == 101.0
    now[0] = 100.05  # get(0.05) timed out
    failures.end_read()
    now[0] = 110.0  # the caller away for 10 s: not the server's silence
    assert failures.idle_deadline() == pytest.approx(110.95)
    now[0] = 110.95  # polls that add up to rpc_timeout
    failures.end_read()
    assert failures.idle_spent == pytest.approx(1.0)
    now[0] = 111.0
    assert failures.idle_deadline() == pytest.approx(111.0)  # spent: the read only drains
