"""Structured Streaming reads and writes through the ``liftbridge`` data source."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import Client, NoSuchStreamError
from tests.integration.conftest import StreamFactory, unique
from tests.spark._helpers import read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

TIMEOUT = 180


def _publish(client: Client, stream: str, values: list[str], partitions: int) -> None:
    futures = [
        client.publish_async(stream, v.encode(), partition=i % partitions)
        for i, v in enumerate(values)
    ]
    for future in futures:
        future.result()


def _run_to_parquet(
    spark: Any, address: str, stream: str, out: Path, checkpoint: Path, **options: str
) -> Any:
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", address)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
    assert query.exception() is None
    return query


def test_stream_read_restarts_from_checkpoint_exactly_once(
    spark: Any,
    liftbridge_address: str,
    liftbridge_client: Client,
    new_stream: StreamFactory,
    tmp_path: Path,
) -> None:
    stream = new_stream(partitions=2)
    first = [f"a{i}" for i in range(30)]
    _publish(liftbridge_client, stream, first, 2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    query = _run_to_parquet(spark, liftbridge_address, stream, out, checkpoint)
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == 30
    assert max(batches) <= 20 and len(batches) >= 2, batches  # maxOffsetsPerTrigger held
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end[stream] == {"0": 15, "1": 15}
    created = liftbridge_client.fetch_metadata(stream).streams[stream].creation_timestamp_ns
    assert end["liftbridge.streamCreated"] == {stream: created}
    # Lag per partition = latestOffset - endOffset (documented on StreamReader).
    latest = json.loads(query.lastProgress["sources"][0]["latestOffset"])
    assert latest == end

    second = [f"b{i}" for i in range(15)]
    _publish(liftbridge_client, stream, second, 2)
    query = _run_to_parquet(spark, liftbridge_address, stream, out, checkpoint)
    assert sum(p["numInputRows"] for p in query.recentProgress) == 15  # only the new ones

    rows = spark.read.parquet(str(out)).select("value", "partition", "offset").collect()
    assert len(rows) == 45
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(first + second)
    assert len({(r.partition, r.offset) for r in rows}) == 45


@pytest.mark.parametrize(
    ("before", "after", "count"),
    [
        # Its log now ends before the checkpoint. (The checkpoint's creation time tells
        # first; without one, the short log would.)
        pytest.param(1, 1, 3, id="below-the-checkpoint"),
        # More partitions, 15 messages each: the restart read partition 0 on from the old
        # offset 10, skipping the new log's first ten messages.
        pytest.param(1, 2, 30, id="more-partitions-past-the-checkpoint"),
        # Fewer partitions: checkpointed partition 1 no longer exists, and was dropped
        # from the next offsets (Kafka's "are gone"); 8 messages, past partition 0's
        # checkpointed offset 5.
        pytest.param(2, 1, 8, id="a-partition-gone"),
    ],
)
def test_a_stream_created_again_while_the_query_is_stopped_is_data_loss(
    spark: Any,
    liftbridge_address: str,
    liftbridge_client: Client,
    new_stream: StreamFactory,
    tmp_path: Path,
    before: int,
    after: int,
    count: int,
) -> None:
    """The stream (10 messages in ``before`` partitions) is deleted and created again
    with ``after`` partitions and ``count`` messages while the query is stopped. Reading
    on from the checkpointed offsets would skip or drop some of the new log without a
    word; as Kafka's connector, that is data loss. With failOnDataLoss=false the new
    stream is read whole (its log past the checkpoint's offsets too)."""
    stream = new_stream(partitions=before)
    _publish(liftbridge_client, stream, [f"old{i}" for i in range(10)], before)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    _run_to_parquet(spark, liftbridge_address, stream, out, checkpoint)

    liftbridge_client.delete_stream(stream)
    liftbridge_client.create_stream(stream, stream, partitions=after)
    new = [f"new{i}" for i in range(count)]
    _publish(liftbridge_client, stream, new, after)

    with pytest.raises(Exception, match="was deleted and created again since the query's"):
        _run_to_parquet(spark, liftbridge_address, stream, out, checkpoint)
    _run_to_parquet(spark, liftbridge_address, stream, out, checkpoint, failOnDataLoss="false")
    values = sorted(bytes(r.value).decode() for r in spark.read.parquet(str(out)).collect())
    assert values == sorted([f"old{i}" for i in range(10)] + new)


def test_a_starting_offset_past_the_end_is_refused(
    spark: Any,
    liftbridge_address: str,
    liftbridge_client: Client,
    new_stream: StreamFactory,
    tmp_path: Path,
) -> None:
    """A query told to start at offset 100 of a 10-message partition took the log
    ending before it for a stream created again: DataLossError about a deleted stream,
    or with failOnDataLoss=false every row from offset 0, which it was told to skip."""
    stream = new_stream(partitions=2)
    _publish(liftbridge_client, stream, [f"m{i}" for i in range(20)], 2)
    past = json.dumps({stream: {"0": 100}})
    with pytest.raises(Exception, match="partition 0: option 'startingOffsets' is 100, past"):
        _run_to_parquet(
            spark,
            liftbridge_address,
            stream,
            tmp_path / "out",
            tmp_path / "checkpoint",
            startingOffsets=past,
            failOnDataLoss="false",
        )
    assert not list((tmp_path / "out").glob("*.parquet"))


def _running_query(spark: Any, address: str, stream: str, checkpoint: Path, fail: str) -> Any:
    """A query reading ``stream`` from the earliest offset into a memory table named
    after the stream, run with processAllAvailable()."""
    return (
        spark.readStream.format("liftbridge")
        .option("brokers", address)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", fail)
        .load()
        .writeStream.format("memory")
        .queryName(stream.replace("-", "_"))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def _values(spark: Any, stream: str) -> list[str]:
    table = stream.replace("-", "_")
    return sorted(bytes(r.value).decode() for r in spark.table(table).collect())


def test_a_stream_deleted_and_created_again_under_a_running_query(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    """Between two micro-batches the stream is deleted (the query failed with
    NoSuchStreamError, failOnDataLoss=false or not), then created again and filled
    past the query's offsets (it read on from them: the new log's first offsets were
    skipped without a word). The stream's creation time tells; without
    failOnDataLoss the query waits for the stream and reads the new one whole."""
    stream = unique("spark")
    client = liftbridge_client
    client.create_stream(stream, stream)
    try:
        _publish(client, stream, [f"old{i}" for i in range(5)], 1)
        query = _running_query(spark, liftbridge_address, stream, tmp_path / "c1", "false")
        try:
            query.processAllAvailable()
            client.delete_stream(stream)
            query.processAllAvailable()  # no micro-batch, no failure while it is gone
            client.create_stream(stream, stream, partitions=2)
            new = [f"new{i}" for i in range(16)]  # 8 a partition: past offset 5
            _publish(client, stream, new, 2)
            query.processAllAvailable()
            assert query.exception() is None
            assert _values(spark, stream) == sorted([f"old{i}" for i in range(5)] + new)
        finally:
            query.stop()

        query = _running_query(spark, liftbridge_address, stream, tmp_path / "c2", "true")
        try:
            query.processAllAvailable()
            client.delete_stream(stream)
            client.create_stream(stream, stream)
            _publish(client, stream, [f"again{i}" for i in range(20)], 1)
            # Whether a micro-batch polled while the stream was gone is up to timing.
            gone = "was deleted and created again since|no longer exists"
            with pytest.raises(Exception, match=gone):
                query.processAllAvailable()
        finally:
            query.stop()
        query = _running_query(spark, liftbridge_address, stream, tmp_path / "c3", "true")
        try:
            query.processAllAvailable()
            client.delete_stream(stream)
            with pytest.raises(Exception, match="no longer exists.*failOnDataLoss=false"):
                query.processAllAvailable()
        finally:
            query.stop()
    finally:
        with contextlib.suppress(NoSuchStreamError):
            client.delete_stream(stream)


def test_stream_write_copies_a_stream(
    spark: Any,
    liftbridge_address: str,
    liftbridge_client: Client,
    new_stream: StreamFactory,
    tmp_path: Path,
) -> None:
    source, target = new_stream(partitions=2), new_stream()
    values = [f"m{i}" for i in range(40)]
    _publish(liftbridge_client, source, values, 2)
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", liftbridge_address)
        .option("stream", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "concat(stream, '-', partition, '-', offset) as correlationId")
        .writeStream.format("liftbridge")
        .option("brokers", liftbridge_address)
        .option("stream", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
    assert query.exception() is None
    copied = read_all(liftbridge_client, target)
    assert sorted(m.value.decode() for m in copied) == sorted(values)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("endingOffsets", "latest"),
        ("endingOffsetsByTimestamp", '{{"{stream}": {{"0": 1700000000000}}}}'),
        ("endingTimestamp", "1700000000000"),
    ],
)
def test_batch_only_option_is_refused_by_a_streaming_read(
    spark: Any,
    liftbridge_address: str,
    new_stream: StreamFactory,
    tmp_path: Path,
    option: str,
    value: str,
) -> None:
    """The refusal is the whole error: refused while Spark made the reader, it came
    with PySpark's own UnboundLocalError ("cannot access local variable 'reader'")
    attached, from the streaming-source runner's clean-up."""
    stream = new_stream()
    with pytest.raises(Exception, match=f"'{option}' is for batch reads only") as refused:
        query = (
            spark.readStream.format("liftbridge")
            .option("brokers", liftbridge_address)
            .option("stream", stream)
            .option(option, value.format(stream=stream))
            .load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(TIMEOUT)
        finally:
            query.stop()
    assert "UnboundLocalError" not in str(refused.value), refused.value
