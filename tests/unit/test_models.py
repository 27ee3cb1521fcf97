"""Models: wire conversion, nanosecond timestamps, immutability, pickling."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from liftbridge_sync import Ack, AckPolicy, Message, Metadata, StartAt, StopAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.models import FrozenMap, datetime_from_ns, ns_from_datetime
from liftbridge_sync.positions import StartKind, StopKind
from liftbridge_sync.tail import parse_start, parse_stop


def test_nanosecond_timestamps_round_trip_through_datetime() -> None:
    ns = 1_700_000_000_123_456_789
    when = datetime_from_ns(ns)
    assert when == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert ns_from_datetime(when) == ns - 789  # datetime keeps microseconds
    assert datetime_from_ns(0) is None
    other_zone = when.astimezone(timezone(timedelta(hours=5)))
    assert ns_from_datetime(other_zone) == ns - 789


def test_message_from_wire() -> None:
    pb = api_pb2.Message(
        offset=7,
        key=b"k",
        value=b"v",
        timestamp=1_700_000_000_000_000_000,
        stream="s",
        partition=2,
        subject="sub.2",
        replySubject="r",
        headers={"subject": b"sub.2", "h": b"1"},
    )
    msg = Message.from_proto(pb)
    assert (msg.offset, msg.key, msg.value, msg.partition) == (7, b"k", b"v", 2)
    assert (msg.stream, msg.subject, msg.reply_subject) == ("s", "sub.2", "r")
    assert dict(msg.headers) == {"subject": b"sub.2", "h": b"1"}
    assert msg.timestamp == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert Message.from_proto(api_pb2.Message(value=b"x")).key is None
    assert pickle.loads(pickle.dumps(msg)) == msg
    with pytest.raises(TypeError):
        msg.headers["h"] = b"2"  # type: ignore[index]


def test_ack_from_wire_keeps_chosen_partition_and_error() -> None:
    pb = api_pb2.Ack(
        stream="s",
        partitionSubject="sub",
        msgSubject="sub.3",
        offset=11,
        ackInbox="inbox",
        correlationId="c",
        ackPolicy=api_pb2.ALL,
        receptionTimestamp=1_000,
        commitTimestamp=2_000,
    )
    ack = Ack.from_proto(pb, partition=3)
    assert ack.partition == 3 and ack.offset == 11 and ack.ack_policy is AckPolicy.ALL
    assert ack.ack_error is None
    assert ack.commit_timestamp_ns == 2_000
    failed = Ack.from_proto(api_pb2.Ack(ackError=api_pb2.Ack.TOO_LARGE))
    assert failed.ack_error == "TOO_LARGE"


def test_metadata_from_wire_skips_unknown_streams() -> None:
    pb = api_pb2.FetchMetadataResponse(
        brokers=[api_pb2.Broker(id="a", host="127.0.0.1", port=9292, leaderCount=1)],
        streamMetadata=[
            api_pb2.StreamMetadata(
                name="s",
                subject="sub",
                partitions={
                    1: api_pb2.PartitionMetadata(id=1, leader="a", isr=["a"], highWatermark=4),
                    0: api_pb2.PartitionMetadata(id=0, leader="a", newestOffset=-1),
                },
            ),
            api_pb2.StreamMetadata(name="missing", error=api_pb2.StreamMetadata.UNKNOWN_STREAM),
        ],
    )
    md = Metadata.from_proto(pb, fetched_at=1.0)
    assert list(md.streams) == ["s"]
    assert list(md.streams["s"].partitions) == [0, 1]
    assert md.partition("s", 1).high_watermark == 4  # type: ignore[union-attr]
    assert md.partition("s", 9) is None and md.partition("x", 0) is None
    assert md.broker("a").address == "127.0.0.1:9292"  # type: ignore[union-attr]
    assert md.streams["s"].partition_subject(0) == "sub"
    assert md.streams["s"].partition_subject(1) == "sub.1"
    assert pickle.loads(pickle.dumps(md)) == md


def test_frozen_map_is_read_only_and_comparable() -> None:
    fm = FrozenMap({"a": 1})
    assert fm == {"a": 1} and len(fm) == 1 and hash(fm) == hash(FrozenMap({"a": 1}))
    with pytest.raises(TypeError):
        fm["b"] = 2  # type: ignore[index]


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: StartAt.timestamp(datetime(1, 1, 1)), "start timestamp"),
        (lambda: StopAt.timestamp(datetime.min), "stop timestamp"),
        (lambda: parse_start("time:0001-01-01"), "start timestamp"),
        (lambda: parse_stop("time:0001-01-01T00:00:00"), "stop timestamp"),
    ],
)
def test_a_naive_datetime_local_time_cannot_hold_is_a_configuration_error(
    make: Callable[[], object], named: str
) -> None:
    # Taking it as local time fails in the platform's conversion ("year 0 is out of
    # range", an OverflowError elsewhere): typed, naming the argument, in the words the
    # other early times get (not the platform's, nor the datetime's repr).
    with pytest.raises(ConfigurationError, match=f"^{named} must not be before 1970$"):
        make()


def test_start_and_stop_positions() -> None:
    assert StartAt.offset(5).at_offset == 5 and StartAt.offset(5).kind is StartKind.OFFSET
    assert StartAt.timestamp(3).at_timestamp_ns == 3
    when = datetime(2024, 1, 1, tzinfo=UTC)
    assert StartAt.timestamp(when).at_timestamp_ns == ns_from_datetime(when)
    delta = StartAt.time_delta(60).resolve_timestamp_ns()
    now = ns_from_datetime(datetime.now(UTC))
    assert now - 61_000_000_000 < delta < now
    pinned = StartAt.time_delta(60).pinned()
    assert pinned.kind is StartKind.TIMESTAMP
    assert now - 61_000_000_000 < pinned.at_timestamp_ns <= ns_from_datetime(datetime.now(UTC))
    assert StartAt.time_delta(math.inf).pinned() == StartAt.timestamp(0)
    assert StartAt.offset(5).pinned() == StartAt.offset(5)
    assert StopAt.latest().kind is StopKind.LATEST
    assert StopAt.offset(0).at_offset == 0
    assert StartAt.cursor("c").cursor_id == "c"
    assert StopAt.offset(2**63 - 1).at_offset == 2**63 - 1  # int64 on the wire
    assert StartAt.timestamp(2**63 - 1).at_timestamp_ns == 2**63 - 1
    for bad in (
        lambda: StartAt.offset(-1),
        lambda: StartAt.offset(2**63),  # would fail untyped when put in the request
        lambda: StopAt.offset(10**20),
        lambda: StartAt.timestamp(2**63),
        lambda: StopAt.timestamp(datetime(2262, 4, 12, tzinfo=UTC)),
        lambda: StopAt.offset(True),
        lambda: StartAt.timestamp("yesterday"),  # type: ignore[arg-type]
        lambda: StartAt.time_delta(-1),
        lambda: StartAt.cursor(""),
    ):
        with pytest.raises(ConfigurationError):
            bad()  # type: ignore[no-untyped-call]
