"""Batch reads through the ``liftbridge`` data source against the real server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from liftbridge_sync import Client, StartAt, StopAt
from tests.integration.conftest import StreamFactory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def _fill(client: Client, stream: str, partitions: int, per_partition: int) -> None:
    futures = [
        client.publish_async(
            stream,
            f"p{p}-{i}".encode(),
            key=f"k{i}".encode(),
            partition=p,
            headers={"n": str(i).encode()},
        )
        for p in range(partitions)
        for i in range(per_partition)
    ]
    for future in futures:
        future.result()


def _reader(spark: Any, address: str, stream: str) -> Any:
    return spark.read.format("liftbridge").option("brokers", address).option("stream", stream)


def test_batch_read_matches_published_with_every_column(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=3)
    _fill(liftbridge_client, stream, 3, 20)
    df = _reader(spark, liftbridge_address, stream).option("includeHeaders", "true").load()
    assert df.columns == [
        "key",
        "value",
        "stream",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "subject",
        "replySubject",
        "correlationId",
        "headers",
    ]
    rows = df.collect()
    assert len(rows) == 60
    expected = {(p, i) for p in range(3) for i in range(20)}
    assert {(r.partition, r.offset) for r in rows} == expected
    for r in rows:
        assert bytes(r.value) == f"p{r.partition}-{r.offset}".encode()
        assert bytes(r.key) == f"k{r.offset}".encode()
        assert r.stream == stream
        assert r.subject == (stream if r.partition == 0 else f"{stream}.{r.partition}")
        assert r.replySubject is None
        assert ("n", str(r.offset).encode()) in [(h.key, bytes(h.value)) for h in r.headers]
        assert r.timestamp is not None and r.timestamp.year >= 2024
        assert r.timestampType == 1  # LogAppendTime, as Kafka numbers it
    # The default schema has no headers column; load(path) names the stream.
    plain = spark.read.format("liftbridge").option("brokers", liftbridge_address).load(stream)
    assert "headers" not in plain.columns
    assert plain.filter("partition = 1").count() == 20


def test_offset_ranges_and_splits(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=3)
    _fill(liftbridge_client, stream, 3, 30)
    starting = json.dumps({stream: {"0": 25, "1": -2, "2": 29}})
    ending = json.dumps({stream: {"0": 30, "1": 3, "2": -1}})
    df = (
        _reader(spark, liftbridge_address, stream)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
    )
    counts = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
    assert counts == {0: 5, 1: 3, 2: 1}
    split = _reader(spark, liftbridge_address, stream).option("maxRecordsPerPartition", "7").load()
    assert split.rdd.getNumPartitions() == 15  # ceil(30 / 7) = 5 per partition
    assert split.count() == 90
    spread = _reader(spark, liftbridge_address, stream).option("minPartitions", "7").load()
    assert spread.rdd.getNumPartitions() == 9  # ceil(30 * 7 / 90) = 3 per partition
    assert sorted(r.offset for r in spread.filter("partition = 0").collect()) == list(range(30))
    only = _reader(spark, liftbridge_address, stream).option("partitions", "0,2").load()
    assert sorted({r.partition for r in only.select("partition").collect()}) == [0, 2]


def test_starting_timestamp(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    _fill(liftbridge_client, stream, 1, 5)
    middle = liftbridge_client.fetch_partition_metadata(stream, 0)
    assert middle.high_watermark == 4
    rows = _reader(spark, liftbridge_address, stream).load().orderBy("offset").collect()
    cut = rows[3].timestamp
    epoch_ms = int(cut.timestamp() * 1000)
    later = _reader(spark, liftbridge_address, stream).option("startingTimestamp", str(epoch_ms))
    offsets = [r.offset for r in later.load().collect()]
    assert offsets and min(offsets) <= 3 and max(offsets) == 4
    assert all(r.timestamp >= rows[offsets[0]].timestamp for r in later.load().collect())


def test_empty_stream_reads_no_rows(
    spark: Any, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=2)
    assert _reader(spark, liftbridge_address, stream).load().count() == 0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "startingOffset",
            "earliest",
            "unknown read option 'startingoffset' (did you mean 'startingOffsets'?)",
        ),
        ("partitioner", "key", "option 'partitioner' is for writes only; remove it"),
        ("startingOffsets", "{not json", "option 'startingOffsets' must be 'earliest'"),
        ("startingOffsets", '{"other": {"0": 1}}', "keyed by the stream"),
        ("endingOffsets", "earliest", "may not be earliest"),
        ("startingOffsets", "latest", "'startingOffsets' may not be latest (-1) in a batch read"),
        ("maxOffsetsPerTrigger", "many", "option 'maxOffsetsPerTrigger' must be an integer"),
        ("maxOffsetsPerTrigger", "10", "'maxOffsetsPerTrigger' is for streaming reads only"),
        ("minOffsetsPerTrigger", "10", "'minOffsetsPerTrigger' is for streaming reads only"),
        ("maxTriggerDelay", "5s", "'maxTriggerDelay' applies only with 'minOffsetsPerTrigger'"),
        ("startingOffsetsByTimestamp", "{bad", "'startingOffsetsByTimestamp' must be JSON"),
        ("endingOffsetsByTimestamp", '{"other": {"0": 1}}', "must map the stream"),
        ("startingOffsetsByTimestamp", '{"S": {"0": -1}}', "must map the stream"),
        ("startingOffsetsByTimestampStrategy", "latest", "applies only with"),
        ("endingTimestamp", "soon", "option 'endingTimestamp' must be an integer"),
        ("includeHeaders", "yes", "option 'includeHeaders' must be 'true' or 'false'"),
        ("resumePaused", "yes", "option 'resumePaused' must be 'true' or 'false'"),
        ("partitions", "0,7", "has no partition [7]"),
        ("liftbridge.bogus", "1", "unknown option 'liftbridge.bogus'"),
    ],
)
def test_bad_options_name_the_problem(
    spark: Any,
    liftbridge_address: str,
    new_stream: StreamFactory,
    option: str,
    value: str,
    message: str,
) -> None:
    stream = new_stream()
    with pytest.raises(Exception, match=_escape(message)):
        _reader(spark, liftbridge_address, stream).option(option, value).load().collect()


def test_starting_after_ending_is_refused(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    _fill(liftbridge_client, stream, 1, 10)
    reader = _reader(spark, liftbridge_address, stream)
    reader = reader.option("startingOffsets", json.dumps({stream: {"0": 5}}))
    with pytest.raises(Exception, match="'startingOffsets' resolves to 5, after option 'endingOff"):
        reader.option("endingOffsets", json.dumps({stream: {"0": 3}})).load().collect()
    beyond = _reader(spark, liftbridge_address, stream)
    beyond = beyond.option("startingOffsets", json.dumps({stream: {"0": 12}}))
    with pytest.raises(Exception, match="resolves to 12, after option 'endingOffsets' 10"):
        beyond.load().collect()
    # An end past the log was cut to its end without a word (10 rows for 100 asked).
    past = _reader(spark, liftbridge_address, stream)
    past = past.option("endingOffsets", json.dumps({stream: {"0": 100}}))
    with pytest.raises(Exception, match="'endingOffsets' 100 is past the end of the log \\(10,"):
        past.load().collect()
    assert (
        _reader(spark, liftbridge_address, stream)
        .option("endingOffsets", json.dumps({stream: {"0": 10}}))
        .load()
        .count()
        == 10
    )
    # Equal ends are an empty range, not an error.
    empty = _reader(spark, liftbridge_address, stream)
    empty = empty.option("startingOffsets", json.dumps({stream: {"0": 10}}))
    assert empty.load().count() == 0


def test_a_paused_partition_is_read_only_with_resume_paused(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # The read failed with the core client's "subscribe with resume=True", which a Spark
    # user cannot pass; no read option resumed the partition.
    stream = new_stream(partitions=2)
    _fill(liftbridge_client, stream, 2, 10)
    liftbridge_client.pause_stream(stream, partitions=[0])
    told = "partition 0 is paused: set option resumePaused=true"
    # From earliest, the planner looks for the first offset: it fails there.
    with pytest.raises(Exception, match=told):
        _reader(spark, liftbridge_address, stream).load().collect()
    # From given offsets the planner subscribes to nothing: the task fails.
    given = _reader(spark, liftbridge_address, stream)
    given = given.option("startingOffsets", json.dumps({stream: {"0": 0, "1": 0}}))
    with pytest.raises(Exception, match=told):
        given.load().collect()
    assert liftbridge_client.fetch_partition_metadata(stream, 0).paused
    rows = _reader(spark, liftbridge_address, stream).option("resumePaused", "true").load()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows.collect()) == [
        (p, i, f"p{p}-{i}".encode()) for p in range(2) for i in range(10)
    ]
    # Resumed: a subscription that does not ask to resume reads it. (v1.9.0's metadata
    # goes on saying paused after a resume: its flag is never cleared.)
    with liftbridge_client.subscribe(
        stream, partition=0, start=StartAt.earliest(), stop=StopAt.offset(9)
    ) as sub:
        assert [m.offset for m in sub] == list(range(10))


def test_a_read_schema_is_checked_where_the_read_is_planned(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # A schema given with .schema() was used as it was: a column of another type failed
    # on the executors in Arrow's words ("ArrowInvalid ..."), a column the source lacks
    # there too.
    stream = new_stream()
    _fill(liftbridge_client, stream, 1, 5)
    wrong = _reader(spark, liftbridge_address, stream).schema("value string, offset long")
    with pytest.raises(Exception, match="column 'value' of the read schema is string: the li"):
        wrong.load().collect()
    with pytest.raises(Exception, match="column 'value' of the read schema is string"):
        spark.readStream.format("liftbridge").option("brokers", liftbridge_address).option(
            "stream", stream
        ).schema("value string").load().writeStream.format("memory").queryName(
            "wrong_schema"
        ).start().awaitTermination(60)
    unknown = _reader(spark, liftbridge_address, stream).schema("value binary, size int")
    with pytest.raises(Exception, match="no column 'size'"):
        unknown.load().collect()
    # A subset of the columns, in another order, is read.
    subset = _reader(spark, liftbridge_address, stream).schema("offset long, value binary")
    assert [(r.offset, bytes(r.value)) for r in subset.load().collect()] == [
        (i, f"p0-{i}".encode()) for i in range(5)
    ]


def test_missing_stream_and_unreachable_broker(spark: Any, liftbridge_address: str) -> None:
    with pytest.raises(Exception, match="stream 'no-such-stream' does not exist"):
        _reader(spark, liftbridge_address, "no-such-stream").load().collect()
    with pytest.raises(Exception, match="option 'stream' is required"):
        spark.read.format("liftbridge").option("brokers", liftbridge_address).load().collect()
    # Named as the writes name it: the read said "request: broker unavailable" alone.
    with pytest.raises(
        Exception, match="BrokerUnavailableError: option 'brokers': no .*127.0.0.1:1"
    ):
        (
            _reader(spark, "127.0.0.1:1", "orders")
            .option("liftbridge.retry.maxDelayMs", "500")
            .option("liftbridge.rpcTimeoutMs", "1000")
            .load()
            .collect()
        )


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_splits_are_balanced() -> None:
    pytest.importorskip("pyspark")
    from liftbridge_sync.spark.ranges import split_ranges

    def sizes(ranges: list[Any]) -> list[tuple[int, int]]:
        return [(r.partition, r.end - r.start) for r in ranges]

    starts, ends = {0: 0, 1: 0, 2: 0}, {0: 2500, 1: 2500, 2: 2}
    assert sizes(split_ranges("s", starts, ends, 0)) == [(0, 2500), (1, 2500), (2, 2)]
    assert sizes(split_ranges("s", starts, ends, 0, 6)) == [
        (0, 834), (0, 833), (0, 833), (1, 834), (1, 833), (1, 833), (2, 2)
    ]  # fmt: skip
    assert sizes(split_ranges("s", {0: 10}, {0: 2511}, 1000)) == [(0, 834), (0, 834), (0, 833)]
    pieces = split_ranges("s", {0: 10}, {0: 13}, 0, 50)  # never an empty piece
    assert [(r.start, r.end) for r in pieces] == [(10, 11), (11, 12), (12, 13)]
    assert split_ranges("s", {0: 5, 1: 3}, {0: 5}, 2, 4) == []
