"""The rules of what a forward subscription may deliver of a batch (screening.py)."""

from __future__ import annotations

import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.subscription.screening import Screened, before_start, misaddressed, screen


def _batch(*offsets: int, stamps: tuple[int, ...] | None = None) -> list[api_pb2.Message]:
    stamps = stamps or tuple(1_000 + o for o in offsets)
    return [api_pb2.Message(offset=o, timestamp=t) for o, t in zip(offsets, stamps, strict=True)]


@pytest.mark.parametrize(
    ("offsets", "last", "in_order"),
    [
        ((5, 6, 7), 4, 3),  # the common case: everything after the last delivered
        ((5, 9, 12), 4, 3),  # gaps (compaction) are in order
        ((5, 6, 7), None, 3),  # nothing delivered yet
        ((0,), None, 1),
        ((4,), 4, 0),  # a repeat of the last delivered offset
        ((3, 5, 6), 4, 0),  # below the last delivered: nothing of it goes out
        ((5, 6, 6, 7), 4, 2),  # a repeat inside the batch
        ((5, 7, 6), 4, 2),  # a step back inside the batch
    ],
)
def test_only_strictly_rising_offsets_after_the_last_delivered_are_in_order(
    offsets: tuple[int, ...], last: int | None, in_order: int
) -> None:
    assert screen(_batch(*offsets), last, None, None) == Screened(in_order, None)


@pytest.mark.parametrize(
    ("offsets", "stop", "stop_at"),
    [
        ((5, 6, 7), 7, None),  # the stop offset itself is delivered
        ((5, 6, 7), 6, 2),
        ((5, 8, 9), 6, 1),  # the stop offset was compacted away: end before 8
        ((7, 8), 6, 0),  # nothing of the batch is inside the range
    ],
)
def test_nothing_past_the_stop_offset_is_delivered(
    offsets: tuple[int, ...], stop: int, stop_at: int | None
) -> None:
    assert screen(_batch(*offsets), 4, stop, None) == Screened(len(offsets), stop_at)


def test_a_stop_timestamp_ends_before_the_first_later_message() -> None:
    batch = _batch(5, 6, 7, 8, stamps=(10, 20, 31, 25))
    assert screen(batch, 4, None, 30) == Screened(4, 2)
    assert screen(batch, 4, None, 40) == Screened(4, None)


def test_the_earlier_of_the_two_stops_wins() -> None:
    batch = _batch(5, 6, 7, 8, stamps=(10, 20, 30, 40))
    assert screen(batch, 4, 7, 15) == Screened(4, 1)  # the timestamp is earlier
    assert screen(batch, 4, 5, 35) == Screened(4, 1)  # the offset is earlier


def test_a_late_message_never_moves_a_cut_at_the_batch_start_forward() -> None:
    # The stop offset 10 was compacted away: the batch starts past it, so nothing of
    # it may go out, whatever the timestamps say later on.
    batch = _batch(11, 12, 13, stamps=(900, 950, 1100))
    assert screen(batch, 9, 10, 1000) == Screened(3, 0)


def test_the_stop_is_looked_for_only_in_the_in_order_run() -> None:
    # 9 is past the stop, but it comes after the step back: the refusal decides first.
    batch = _batch(5, 3, 9)
    assert screen(batch, 4, 6, None) == Screened(1, None)
    assert screen(_batch(3, 9), 4, 6, None) == Screened(0, None)


@pytest.mark.parametrize(
    ("offsets", "start", "skipped"),
    [
        ((3, 4, 5, 6), 5, 2),  # v1.9.0 read from the old high watermark + 1 (3), not 5
        ((3, 4), 5, 2),  # all of it before the start: nothing goes out
        ((5, 6), 5, 0),  # the requested start itself is delivered
        ((7, 8), 5, 0),  # the start offset was compacted away: 7 is the first after it
        ((2, 7, 3), 5, 1),  # only the leading run; what follows is the order check's
    ],
)
def test_offsets_before_the_requested_start_are_skipped(
    offsets: tuple[int, ...], start: int, skipped: int
) -> None:
    assert before_start(_batch(*offsets), start) == skipped


@pytest.mark.parametrize(
    ("stamps", "since", "skipped"),
    [
        ((90, 95, 100, 105), 100, 2),  # written, not committed, when the time was pinned
        ((100, 105), 100, 0),  # stamped at the start time itself: delivered
        ((90, 95), 100, 2),  # all older: nothing goes out
        ((90, 101, 95), 100, 1),  # only the leading run
    ],
)
def test_messages_stamped_before_a_pinned_start_time_are_skipped(
    stamps: tuple[int, ...], since: int, skipped: int
) -> None:
    batch = _batch(*range(5, 5 + len(stamps)), stamps=stamps)
    assert before_start(batch, 5, since) == skipped
    assert before_start(batch, 5) == 0  # without a start time only offsets count


def _addressed(stream: str, partition: int, offset: int = 0) -> api_pb2.Message:
    return api_pb2.Message(offset=offset, stream=stream, partition=partition)


@pytest.mark.parametrize(
    ("batch", "stray"),
    [
        ([_addressed("s", 2), _addressed("s", 2)], None),
        ([api_pb2.Message(offset=0), api_pb2.Message(offset=1)], None),  # naming none
        ([_addressed("s", 3), _addressed("s", 2)], 0),
        ([_addressed("s", 2), _addressed("t", 2), _addressed("t", 2)], 1),
        ([_addressed("s", 2), _addressed("s", 2), _addressed("s", 0)], 2),
        ([_addressed("t", 2)], 0),
    ],
)
def test_a_message_naming_another_stream_or_partition_is_found(
    batch: list[api_pb2.Message], stray: int | None
) -> None:
    assert misaddressed(batch, "s", 2) == stray
