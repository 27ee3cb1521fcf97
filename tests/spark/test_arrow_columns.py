"""Wire messages to Arrow record batches: cells, order and batch sizes (no Spark session).

The connector's reader hands Spark these batches; every column is held to what the
message model says of the same wire message.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql.types import (  # noqa: E402 - after the skips
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from liftbridge_sync import ConfigurationError, Message  # noqa: E402
from liftbridge_sync._proto import api_pb2  # noqa: E402
from liftbridge_sync.spark.arrow import LOG_APPEND_TIME, arrow_schema, record_batches  # noqa: E402

_HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("stream", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField("subject", StringType()),
        StructField("replySubject", StringType()),
        StructField("correlationId", StringType()),
        StructField("headers", _HEADERS),
    ]
)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _wire(offset: int) -> api_pb2.Message:
    return api_pb2.Message(
        offset=offset,
        key=b"k%d" % offset if offset % 3 else b"",  # every third without a key
        value=b"v" * (offset % 5),
        stream="s",
        partition=2,
        subject="s.2",
        replySubject="" if offset % 2 else f"inbox.{offset}",
        timestamp=0 if offset == 4 else 1_700_000_000_123_456_789 + offset * 1000,
        headers={"h": b"%d" % offset, "empty": b""} if offset % 4 == 1 else {},
    )


def test_runs_become_batches_of_at_most_the_given_rows_in_order() -> None:
    runs = [[_wire(o) for o in range(start, end)] for start, end in [(0, 3), (3, 10), (10, 11)]]
    batches = list(record_batches(runs, arrow_schema(_SCHEMA), stream="s", partition=2, rows=4))
    assert [b.num_rows for b in batches] == [4, 4, 3]
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(11))
    assert not list(record_batches([], arrow_schema(_SCHEMA), stream="s", partition=2, rows=4))


def test_every_cell_is_what_the_message_model_says() -> None:
    wire = [_wire(o) for o in range(12)]
    [batch] = record_batches([wire[:5], wire[5:]], arrow_schema(_SCHEMA), stream="s", partition=2)
    columns = batch.to_pydict()
    for i, pb in enumerate(wire):
        message = Message.from_proto(pb)
        assert columns["key"][i] == message.key  # None for an empty key
        assert columns["value"][i] == message.value
        assert (columns["stream"][i], columns["partition"][i]) == ("s", 2)
        assert columns["offset"][i] == message.offset
        assert columns["timestamp"][i] == message.timestamp  # None when unknown (0)
        assert columns["timestampType"][i] == LOG_APPEND_TIME
        assert columns["subject"][i] == message.subject
        assert columns["replySubject"][i] == (message.reply_subject or None)
        assert columns["correlationId"][i] is None
        assert sorted((h["key"], h["value"]) for h in columns["headers"][i]) == sorted(
            message.headers.items()
        )
    assert columns["timestamp"][4] is None
    assert columns["timestamp"][5].microsecond == (123_456 + 5) % 1_000_000


def test_a_column_the_source_lacks_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no column"):
        arrow_schema(StructType([StructField("value", BinaryType()), StructField("x", LongType())]))


def test_offsets_with_gaps_and_short_batches_keep_every_cell() -> None:
    # A compacted log's offsets: gaps inside runs and across them, batches of 3 and 1.
    offsets = [0, 2, 3, 7, 8, 9, 20]
    wire = [_wire(o) for o in offsets]
    batches = list(
        record_batches(
            [wire[:2], wire[2:6], wire[6:]], arrow_schema(_SCHEMA), stream="s", partition=2, rows=3
        )
    )
    assert [b.num_rows for b in batches] == [3, 3, 1]
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == offsets
    assert table.column("stream").to_pylist() == ["s"] * len(offsets)
    assert table.column("partition").to_pylist() == [2] * len(offsets)
    assert table.column("timestampType").to_pylist() == [LOG_APPEND_TIME] * len(offsets)
    assert table.column("correlationId").null_count == len(offsets)
    stamps = table.column("timestamp").to_pylist()
    for offset, stamp in zip(offsets, stamps, strict=True):
        nanos = _wire(offset).timestamp
        assert stamp == Message.from_proto(_wire(offset)).timestamp
        if nanos == 0:
            assert stamp is None
        else:
            assert (stamp - _EPOCH) // timedelta(microseconds=1) == nanos // 1000
