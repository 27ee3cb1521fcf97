"""Decoding activity stream events from ActivityStreamEvent protobufs."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync import ArgumentTypeError, ConfigurationError, ServerError
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.activity import (
    ActivityEvent,
    ConsumerLeftGroup,
    StreamPaused,
    UnknownActivity,
    decode_event,
)
from liftbridge_sync.subscription import activity as activity_module
from liftbridge_sync.subscription.activity import ActivityStream


def test_pause_event_decodes_every_field() -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=42,
        op=api_pb2.PAUSE_STREAM,
        pauseStreamOp=api_pb2.PauseStreamOp(stream="s", partitions=[2, 0], resumeAll=True),
    )
    event = decode_event(pb.SerializeToString(), offset=7, timestamp_ns=5)
    assert event == StreamPaused(
        id=42, offset=7, timestamp_ns=5, stream="s", partitions=(2, 0), resume_all=True
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.id = 1  # type: ignore[misc]


def test_expired_leave_and_unknown_op() -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=3,
        op=api_pb2.LEAVE_CONSUMER_GROUP,
        leaveConsumerGroupOp=api_pb2.LeaveConsumerGroupOp(
            groupId="g", consumerId="c", expired=True
        ),
    )
    left = decode_event(pb.SerializeToString())
    assert isinstance(left, ConsumerLeftGroup) and left.expired and left.group_id == "g"
    future = api_pb2.ActivityStreamEvent(id=4)
    future.op = 99  # type: ignore[assignment]
    assert decode_event(future.SerializeToString()) == UnknownActivity(
        id=4, offset=-1, timestamp_ns=0, op=99
    )


def test_garbage_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="not an ActivityStreamEvent"):
        decode_event(b"\xff\xff\xff")


class _Repeating:
    """A subscription that hands out the same event again and again, each 30 ms later on
    a clock of its own, as a metadata leader's repeats would arrive."""

    def __init__(self, value: bytes) -> None:
        self.value = value
        self.now = 0.0
        self.timeouts: list[float | None] = []

    def monotonic(self) -> float:
        return self.now

    def get(self, timeout: float | None) -> Any:
        self.timeouts.append(timeout)
        assert len(self.timeouts) < 1000, "get() kept waiting: its timeout started again"
        if timeout is not None and timeout <= 0.0:
            raise TimeoutError("nothing new")
        self.now += 0.03
        return types.SimpleNamespace(value=self.value, offset=1, timestamp_ns=1)


def test_dropped_repeats_do_not_extend_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=7, op=api_pb2.ActivityStreamOp.PAUSE_STREAM, pauseStreamOp=api_pb2.PauseStreamOp()
    )
    sub = _Repeating(pb.SerializeToString())
    monkeypatch.setattr(activity_module, "time", sub)
    events = ActivityStream(sub)  # type: ignore[arg-type]
    assert events.get(1.0).id == 7
    with pytest.raises(TimeoutError):
        events.get(0.1)  # only repeats of event 7 arrive: 0.1 s on the clock, not forever
    waits = sub.timeouts[1:]
    assert len(waits) == 5  # after 0, 30, 60, 90 ms, then none left
    assert waits[-1] == 0.0


class _Scripted:
    """A subscription that hands out events with the given ids, then times out."""

    def __init__(self, ids: list[int]) -> None:
        self.values = [
            api_pb2.ActivityStreamEvent(
                id=i, op=api_pb2.DELETE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp()
            ).SerializeToString()
            for i in ids
        ]

    def get(self, timeout: float | None) -> Any:
        if not self.values:
            raise TimeoutError("nothing new")
        return types.SimpleNamespace(value=self.values.pop(0), offset=1, timestamp_ns=1)


def delivered(events: ActivityStream) -> list[int]:
    ids = []
    while True:
        try:
            ids.append(events.get(0).id)
        except TimeoutError:
            return ids


def test_a_replayed_run_is_dropped_and_a_forged_huge_id_does_not_hide_later_events() -> None:
    sub = _Scripted([5, 8, 9, 2**64 - 1, 8, 9, 10, 9, 11])
    assert delivered(ActivityStream(sub)) == [5, 8, 9, 2**64 - 1, 10, 11]  # type: ignore[arg-type]


def test_the_ids_remembered_are_bounded() -> None:
    n = activity_module.REMEMBERED_IDS
    events = ActivityStream(_Scripted([*range(1, n + 2), 2, 1]))  # type: ignore[arg-type]
    # Id 1 left the memory when id n + 1 arrived; 2 is still remembered.
    assert delivered(events)[-2:] == [n + 1, 1]
    assert len(events._seen) == n


@pytest.mark.parametrize(
    "value",
    [
        b"",  # an empty publish to the activity subject
        api_pb2.ActivityStreamEvent(id=9).SerializeToString(),  # CREATE_STREAM (0), no op
        api_pb2.ActivityStreamEvent(
            id=9, op=api_pb2.PAUSE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp(stream="s")
        ).SerializeToString(),
        api_pb2.ActivityStreamEvent(
            op=api_pb2.DELETE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp(stream="s")
        ).SerializeToString(),  # id 0: no Raft index
        b"\x08\x05",  # id 5 and nothing else
    ],
)
def test_a_value_without_its_operation_is_not_an_event(value: bytes) -> None:
    with pytest.raises(ServerError, match="offset 3 is not an ActivityStreamEvent"):
        decode_event(value, offset=3)


def test_an_operation_with_empty_fields_is_an_event() -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=1, op=api_pb2.DELETE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp()
    )
    assert decode_event(pb.SerializeToString()).id == 1
    future = api_pb2.ActivityStreamEvent(id=2)
    future.op = 99  # type: ignore[assignment]
    assert isinstance(decode_event(future.SerializeToString()), UnknownActivity)


@pytest.mark.parametrize("value", ["\x08\x05", 5, None])
def test_a_value_that_is_not_bytes_is_an_argument_type_error(value: Any) -> None:
    with pytest.raises(ArgumentTypeError, match="value must be bytes-like"):
        decode_event(value)


@pytest.mark.parametrize(
    ("offset", "timestamp_ns", "error"),
    [
        ("x", 0, ArgumentTypeError),
        (0, "y", ArgumentTypeError),
        (True, 0, ArgumentTypeError),
        (-2, 0, ConfigurationError),
        (0, 2**70, ConfigurationError),  # its timestamp raised ValueError (year 39381)
    ],
)
def test_a_bad_offset_or_timestamp_is_a_typed_error(
    offset: Any, timestamp_ns: Any, error: type[Exception]
) -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=1, op=api_pb2.DELETE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp(stream="s")
    )
    with pytest.raises(error):
        decode_event(pb.SerializeToString(), offset=offset, timestamp_ns=timestamp_ns)
    newest = decode_event(pb.SerializeToString(), offset=0, timestamp_ns=2**63 - 1)
    assert newest.timestamp is not None and newest.timestamp.year == 2262


def test_bytes_like_values_decode() -> None:
    pb = api_pb2.ActivityStreamEvent(
        id=1, op=api_pb2.DELETE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp(stream="s")
    )
    raw = pb.SerializeToString()
    for value in (bytearray(raw), memoryview(raw)):
        assert decode_event(value).id == 1


_GENUINE = [
    api_pb2.ActivityStreamEvent(
        id=9,
        op=api_pb2.JOIN_CONSUMER_GROUP,
        joinConsumerGroupOp=api_pb2.JoinConsumerGroupOp(
            groupId="g", consumerId="c", streams=["a", "b"]
        ),
    ).SerializeToString(),
    api_pb2.ActivityStreamEvent(
        id=2**64 - 1,
        op=api_pb2.CREATE_STREAM,
        createStreamOp=api_pb2.CreateStreamOp(stream="s", partitions=[0, 1, 2]),
    ).SerializeToString(),
]


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from(_GENUINE),
    cut=st.integers(min_value=0, max_value=64),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    tail=st.binary(max_size=16),
)
def test_corrupted_values_decode_or_raise_server_error(
    base: bytes, cut: int, flips: list[tuple[int, int]], tail: bytes
) -> None:
    value = bytearray(base[:cut] + tail)
    for position, octet in flips:
        if value:
            value[position % len(value)] = octet
    try:
        event = decode_event(bytes(value), offset=1)
    except ServerError:
        return
    assert isinstance(event, ActivityEvent) and event.id > 0
