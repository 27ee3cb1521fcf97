"""Kafka-connector options of the ``liftbridge`` source on real PySpark and a real server:
headers as ``array<struct<key, value>>`` (with the OpenTelemetry context in them),
timestamp-based starts and ends, and ``minOffsetsPerTrigger`` / ``maxTriggerDelay``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import Client
from tests.integration.conftest import StreamFactory, unique
from tests.spark._helpers import read_all
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

TIMEOUT = 180


def _reader(spark: Any, address: str, stream: str) -> Any:
    return spark.read.format("liftbridge").option("brokers", address).option("stream", stream)


def _stream_reader(spark: Any, address: str, stream: str) -> Any:
    return spark.readStream.format("liftbridge").option("brokers", address).option("stream", stream)


def _publish(client: Client, stream: str, count: int, partition: int = 0, tag: str = "m") -> None:
    futures = [
        client.publish_async(
            stream,
            f"{tag}{i}".encode(),
            partition=partition,
            headers={"n": str(i).encode(), "tag": tag.encode()},
        )
        for i in range(count)
    ]
    for future in futures:
        future.result(30)


def _headers(row: Any) -> dict[str, bytes]:
    """The headers this test published (the server adds ``subject`` and ``reply``)."""
    return {h.key: bytes(h.value) for h in row.headers if h.key in ("n", "tag")}


def test_headers_are_an_array_of_key_value_structs_in_batch_and_streaming(
    spark: Any,
    liftbridge_address: str,
    liftbridge_client: Client,
    new_stream: StreamFactory,
    tmp_path: Path,
) -> None:
    stream, copy = new_stream(partitions=2), new_stream()
    _publish(liftbridge_client, stream, 10, partition=0, tag="a")
    _publish(liftbridge_client, stream, 10, partition=1, tag="b")
    df = _reader(spark, liftbridge_address, stream).option("includeHeaders", "true").load()
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = df.collect()
    assert len(rows) == 20
    for row in rows:
        tag = "a" if row.partition == 0 else "b"
        assert _headers(row) == {"n": str(row.offset).encode(), "tag": tag.encode()}
    # Kafka's idiom works on the column: explode and filter by key.
    tags = df.selectExpr("explode(headers) as h").where("h.key = 'tag'").selectExpr("h.value")
    assert sorted(bytes(r.value) for r in tags.collect()) == [b"a"] * 10 + [b"b"] * 10
    # The column writes back as it reads: headers survive a copy.
    df.select("key", "value", "headers").write.format("liftbridge").option(
        "brokers", liftbridge_address
    ).option("stream", copy).mode("append").save()
    copied = read_all(liftbridge_client, copy)
    assert sorted((m.headers["n"], m.headers["tag"]) for m in copied) == sorted(
        (_headers(r)["n"], _headers(r)["tag"]) for r in rows
    )

    # Streaming: the same column shape, through a checkpointed parquet sink.
    query = (
        _stream_reader(spark, liftbridge_address, stream)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
    assert query.exception() is None
    streamed = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(
        (r.partition, r.offset, tuple(sorted(_headers(r).items()))) for r in streamed
    ) == (sorted((r.partition, r.offset, tuple(sorted(_headers(r).items()))) for r in rows))


def test_trace_context_travels_in_the_headers_column(spark: Any, liftbridge_address: str) -> None:
    otel = pytest.importorskip("liftbridge_sync.otel")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    stream = unique("spark-otel")
    try:
        with Client([liftbridge_address], tracer_provider=provider) as client:
            client.create_stream(stream, stream)
            for i in range(3):
                client.publish(stream, b"v%d" % i)
            sends = [s for s in spans.get_finished_spans() if s.name == f"send {stream}"]
            assert len(sends) == 3
            rows = (
                _reader(spark, liftbridge_address, stream)
                .option("includeHeaders", "true")
                .load()
                .orderBy("offset")
                .collect()
            )
            assert len(rows) == 3
            consumer = provider.get_tracer("test")
            for row, send in zip(rows, sends, strict=True):
                assert "traceparent" in {h.key for h in row.headers}
                context = otel.extract_headers(row.headers)
                parent = trace.get_current_span(context).get_span_context()
                assert parent.trace_id == send.context.trace_id
                assert parent.span_id == send.context.span_id
                with consumer.start_as_current_span("handle", context=context):
                    pass
            handled = [s for s in spans.get_finished_spans() if s.name == "handle"]
            assert [s.context.trace_id for s in handled] == [s.context.trace_id for s in sends]
            assert [s.parent.span_id for s in handled if s.parent] == [
                s.context.span_id for s in sends
            ]
            # Without trace headers there is no parent: an empty context.
            empty = otel.extract_headers([("n", b"1")])
            assert not trace.get_current_span(empty).get_span_context().is_valid
            client.delete_stream(stream)
    finally:
        provider.shutdown()


def _first_at_or_after(client: Client, stream: str, partition: int, cut_ms: int) -> int:
    """The offset a timestamp start must resolve to, from the messages' own stamps."""
    messages = [m for m in read_all(client, stream) if m.partition == partition]
    found = [m.offset for m in messages if m.timestamp_ns >= cut_ms * 1_000_000]
    return min(found) if found else max(m.offset for m in messages) + 1


def _stamp_ms(client: Client, stream: str, partition: int, offset: int) -> int:
    messages = read_all(client, stream)
    (message,) = [m for m in messages if m.partition == partition and m.offset == offset]
    return message.timestamp_ns // 1_000_000


def test_starting_and_ending_offsets_by_timestamp_in_batch(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=2)
    _publish(liftbridge_client, stream, 20, partition=0)
    _publish(liftbridge_client, stream, 20, partition=1)
    cut0 = _stamp_ms(liftbridge_client, stream, 0, 8)
    cut1 = _stamp_ms(liftbridge_client, stream, 1, 3)
    end0 = _stamp_ms(liftbridge_client, stream, 0, 15)
    start0 = _first_at_or_after(liftbridge_client, stream, 0, cut0)
    start1 = _first_at_or_after(liftbridge_client, stream, 1, cut1)
    stop0 = _first_at_or_after(liftbridge_client, stream, 0, end0)
    assert start0 <= 8 and start1 <= 3 and stop0 <= 15

    by_time = json.dumps({stream: {"0": cut0, "1": cut1}})
    df = _reader(spark, liftbridge_address, stream).option("startingOffsetsByTimestamp", by_time)
    got = {(r.partition, r.offset) for r in df.load().collect()}
    assert got == {(0, o) for o in range(start0, 20)} | {(1, o) for o in range(start1, 20)}

    # A partition left out starts from startingOffsets; ends by timestamp are exclusive.
    only0 = json.dumps({stream: {"0": cut0}})
    ends = json.dumps({stream: {"0": end0}})
    bounded = (
        _reader(spark, liftbridge_address, stream)
        .option("startingOffsetsByTimestamp", only0)
        .option("startingOffsets", json.dumps({stream: {"1": 17}}))
        .option("endingOffsetsByTimestamp", ends)
        .load()
    )
    got = {(r.partition, r.offset) for r in bounded.collect()}
    assert got == {(0, o) for o in range(start0, stop0)} | {(1, o) for o in (17, 18, 19)}

    # endingTimestamp (all partitions) after every message: ends at the latest offset.
    future_ms = int(time.time() * 1000) + 3_600_000
    everything = _reader(spark, liftbridge_address, stream).option(
        "endingTimestamp", str(future_ms)
    )
    assert everything.load().count() == 40
    # Kafka users' "no end": Long.MaxValue milliseconds, past what int64 nanoseconds hold.
    no_end = _reader(spark, liftbridge_address, stream).option("endingTimestamp", str(2**63 - 1))
    assert no_end.load().count() == 40

    # A start timestamp that matches nothing: an error by default (as Kafka), naming the
    # partition and the strategy option; with strategy latest, that partition is empty.
    late = json.dumps({stream: {"0": cut0, "1": future_ms}})
    failing = _reader(spark, liftbridge_address, stream).option("startingOffsetsByTimestamp", late)
    with pytest.raises(Exception, match="partition 1: no message at or after timestamp"):
        failing.load().collect()
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        failing.load().collect()
    latest = failing.option("startingOffsetsByTimestampStrategy", "latest").load()
    assert {(r.partition, r.offset) for r in latest.collect()} == {
        (0, o) for o in range(start0, 20)
    }
    # startingTimestamp keeps its documented empty result, and takes the strategy too.
    global_late = _reader(spark, liftbridge_address, stream).option(
        "startingTimestamp", str(future_ms)
    )
    assert global_late.load().count() == 0
    with pytest.raises(Exception, match="option 'startingTimestamp'"):
        global_late.option("startingOffsetsByTimestampStrategy", "error").load().collect()


def test_streaming_starts_by_timestamp(
    spark: Any,
    liftbridge_address: str,
    liftbridge_client: Client,
    new_stream: StreamFactory,
    tmp_path: Path,
) -> None:
    stream = new_stream(partitions=2)
    _publish(liftbridge_client, stream, 12, partition=0)
    _publish(liftbridge_client, stream, 12, partition=1)
    cut0 = _stamp_ms(liftbridge_client, stream, 0, 6)
    cut1 = _stamp_ms(liftbridge_client, stream, 1, 10)
    start0 = _first_at_or_after(liftbridge_client, stream, 0, cut0)
    start1 = _first_at_or_after(liftbridge_client, stream, 1, cut1)
    query = (
        _stream_reader(spark, liftbridge_address, stream)
        .option("startingOffsetsByTimestamp", json.dumps({stream: {"0": cut0, "1": cut1}}))
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        [(0, o) for o in range(start0, 12)] + [(1, o) for o in range(start1, 12)]
    )


def test_min_offsets_per_trigger_holds_micro_batches_back(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """minOffsetsPerTrigger=25 with a long maxTriggerDelay: the first micro-batch takes
    the 10 offsets there, as Kafka's (it waited the whole delay, 15 minutes by default,
    after every start); then 10 more start no batch, and 30 do, in one batch. With a
    short delay, 10 offsets go once the delay passed."""
    stream = new_stream()
    _publish(liftbridge_client, stream, 10, tag="first")
    _publish(liftbridge_client, stream, 10, tag="a")
    name = f"held_{unique('q').replace('-', '_')}"
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100")
    query = (
        _stream_reader(spark, liftbridge_address, stream)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "25")
        .option("maxTriggerDelay", "1h")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: spark.table(name).count() == 20, timeout=TIMEOUT, what="20 rows")
        _publish(liftbridge_client, stream, 10, tag="b")
        # Several triggers ran and found too little to start a batch.
        seen = len(query.recentProgress)
        wait_until(
            lambda: len(query.recentProgress) >= seen + 3, timeout=TIMEOUT, what="3 triggers"
        )
        assert query.exception() is None
        assert spark.table(name).count() == 20
        _publish(liftbridge_client, stream, 20, tag="c")
        wait_until(lambda: spark.table(name).count() == 50, timeout=TIMEOUT, what="50 rows")
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert batches == [20, 30]
    finally:
        query.stop()

    delayed = new_stream()
    _publish(liftbridge_client, delayed, 10)
    started = time.monotonic()
    query = (
        _stream_reader(spark, liftbridge_address, delayed)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "1000")
        .option("maxTriggerDelay", "3s")
        .load()
        .writeStream.format("memory")
        .queryName(name + "_delay")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        table = name + "_delay"
        wait_until(lambda: spark.table(table).count() == 10, timeout=TIMEOUT, what="10 rows")
        _publish(liftbridge_client, delayed, 10, tag="late")
        wait_until(lambda: spark.table(table).count() == 20, timeout=TIMEOUT, what="20 rows")
        # Not before maxTriggerDelay since the first micro-batch, let through after
        # `started`.
        assert time.monotonic() - started >= 3.0
        assert query.exception() is None
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
