"""Who reads a ``publish()`` caller's ack: only a caller waiting alone reads it on its
own thread (:meth:`~liftbridge_sync._publishing.waiting.Waiting.wait`), and a
hand-over of several acks starts combining whichever thread read them
(:meth:`~liftbridge_sync._transport.h2.connection.H2PublishStream._hand_over`).

With several callers waiting, the I/O thread hands their acks over together and they
write their next requests together; a caller reading for the others woke them one at a
time, each then wrote alone, and the broker answered each alone (bench/HISTORY.md,
2026-11-26 16:00).
"""

from __future__ import annotations

import concurrent.futures
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from liftbridge_sync import Client
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing.pending import FailureLedger
from liftbridge_sync._publishing.waiting import Waiters, Waiting
from liftbridge_sync._transport.h2 import connection
from liftbridge_sync._wire.publish_codec import decode_response
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY


class _ReadingStream:
    """Stands in for the live stream: records who asks to read, and holds the first
    asker in ``answer_here`` until released (as a caller reading for its ack does)."""

    def __init__(self) -> None:
        self.askers: list[str] = []
        self.first_reads = threading.Event()
        self.release_first = threading.Event()

    def answer_here(self, done: Callable[[], bool]) -> None:
        self.askers.append(threading.current_thread().name)
        if len(self.askers) == 1:
            self.first_reads.set()
            assert self.release_first.wait(10.0), "the test never released the reader"


def _waiting(stream: _ReadingStream) -> Waiting:
    table: Any = types.SimpleNamespace(live=stream, clock=lambda: 0.0)
    loop: Any = types.SimpleNamespace(on_owner_thread=lambda: False)
    return Waiting(table, loop, Waiters(lambda: 0.0), FailureLedger(), None)


def test_a_caller_does_not_read_while_another_publish_caller_waits() -> None:
    stream = _ReadingStream()
    waiting = _waiting(stream)
    futures = [concurrent.futures.Future[Any]() for _ in range(2)]
    results: dict[str, Any] = {}

    def wait(i: int) -> None:
        results[threading.current_thread().name] = waiting.wait(futures[i], 10.0, True)

    first = threading.Thread(target=wait, args=(0,), name="first")
    first.start()
    assert stream.first_reads.wait(10.0)
    second = threading.Thread(target=wait, args=(1,), name="second")
    second.start()
    futures[1].set_result("ack-2")  # answered while the first caller still reads
    second.join(10.0)
    assert not second.is_alive() and results["second"] == "ack-2"
    stream.release_first.set()
    futures[0].set_result("ack-1")
    first.join(10.0)
    assert results["first"] == "ack-1"
    assert stream.askers == ["first"], "a caller read while another one waited"


def test_a_lone_caller_reads_again_once_the_others_are_done() -> None:
    stream = _ReadingStream()
    stream.release_first.set()
    waiting = _waiting(stream)
    for name in ("one", "two"):
        future = concurrent.futures.Future[Any]()
        future.set_result(name)
        # A resolved future is not waited for at all; an unresolved one, alone, is read.
        assert waiting.wait(future, 1.0, True) == name
    pending = concurrent.futures.Future[Any]()
    threading.Timer(0.05, pending.set_result, args=("late",)).start()
    assert waiting.wait(pending, 10.0, True) == "late"
    assert stream.askers == [threading.current_thread().name]


def _unknown_answers() -> list[Any]:
    """Two acks for no pending publish (the publisher drops them)."""
    return [
        decode_response(
            api_pb2.PublishResponse(
                ack=api_pb2.Ack(stream="s", correlationId=f"unknown-{i}", offset=i)
            ).SerializeToString()
        )
        for i in (1, 2)
    ]


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=1)) as server:
        yield server


def test_a_hand_over_of_several_acks_starts_combining_on_any_thread(fake: FakeBroker) -> None:
    with Client([fake.address], retry=FAST_RETRY, publish_transport="h2") as client:
        client.publish("s", b"first")  # a publish() caller wrote its own request
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        assert isinstance(stream, connection.H2PublishStream)
        assert stream._gathering.awaited(2)
        # Two answers for no pending publish (dropped), handed over by this thread as
        # a caller reading here would: the callers they wake must combine.
        answers = _unknown_answers()
        seen: list[int] = []
        emit = stream._on_event

        def record(event: Any) -> None:
            seen.append(stream.outbound.combining)  # when the woken callers may run
            emit(event)

        stream._on_event = record  # type: ignore[method-assign]
        stream._hand_over_lock.acquire()
        stream._hand_over(answers)
        assert seen == [1]
        # Another hand-over before those callers came back: all of them are expected,
        # and only the last one writes (2 + 2 callers, 3 of them only queue).
        stream._hand_over_lock.acquire()
        stream._hand_over(answers)
        assert seen == [1, 3]


def test_callers_a_reading_caller_woke_are_written_without_any_other_event(
    fake: FakeBroker,
) -> None:
    # A caller reading here hands over several acks while the I/O thread waits with no
    # end in sight (nothing due, seconds to its next look). The woken caller only queues
    # its request (combining); the I/O thread must still write it within COMBINE_WAIT.
    # Before, it sat in the queue until the stall check, and the publisher re-sent it
    # as silent: stored twice (CI, gunicorn gthread).
    with Client([fake.address], retry=FAST_RETRY, publish_transport="h2") as client:
        client.publish("s", b"first")
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        assert isinstance(stream, connection.H2PublishStream)
        answers = _unknown_answers()
        stream._hand_over_lock.acquire()
        stream._hand_over(answers, on_io_thread=False)
        assert stream.outbound.combining == 1
        # This caller is the one woken: it queues without writing (or, the I/O thread's
        # wake-up on its way, leaves the writing to it), and nobody else comes.
        ack = client.publish("s", b"second", timeout=3.0)
        assert ack is not None and ack.offset == 1
        assert [r.value for r in fake.received] == [b"first", b"second"]
