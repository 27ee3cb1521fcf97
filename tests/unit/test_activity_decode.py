"""Decoding activity stream events from ActivityStreamEvent protobufs."""

from __future__ import annotations

import dataclasses

import pytest

from liftbridge_sync import ServerError
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.activity import (
    ConsumerLeftGroup,
    StreamPaused,
    UnknownActivity,
    decode_event,
)


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
