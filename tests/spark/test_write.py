"""Batch writes through the ``liftbridge`` data source."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import ByKey, Client, ClientOptions
from liftbridge_sync.spark import publish_partition
from tests.integration.conftest import StreamFactory
from tests.spark._helpers import read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def _writer(df: Any, address: str, stream: str) -> Any:
    return df.write.format("liftbridge").option("brokers", address).option("stream", stream)


def test_batch_write_round_trip(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=2)
    n = 5_000
    df = spark.range(n).selectExpr(
        "cast(id as string) as key",
        "cast(concat('w-', id) as binary) as value",
        "map('src', 'spark') as headers",
    )
    _writer(df, liftbridge_address, stream).option("partitioner", "key").mode("append").save()
    messages = read_all(liftbridge_client, stream)
    assert sorted(m.value for m in messages) == sorted(f"w-{i}".encode() for i in range(n))
    assert {m.partition for m in messages} == {0, 1}
    assert all(m.headers["src"] == b"spark" for m in messages)
    # And back through the reader: the same rows.
    back = spark.read.format("liftbridge").option("brokers", liftbridge_address).load(stream)
    assert back.count() == n


def test_overwrite_and_bad_write_options_are_refused(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="append-only"):
        _writer(df, liftbridge_address, stream).mode("overwrite").save()
    with pytest.raises(Exception, match="option 'startingOffsets' is for reads only; remove"):
        _writer(df, liftbridge_address, stream).option("startingOffsets", "earliest").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="option 'ackPolicy' must be leader, all or none"):
        _writer(df, liftbridge_address, stream).option("ackPolicy", "most").mode("append").save()
    # The rows went to the option's stream, and save()'s was dropped without a word.
    other = new_stream()
    with pytest.raises(Exception, match="option 'stream' .* and the path of load"):
        _writer(df, liftbridge_address, stream).mode("append").save(other)
    assert read_all(liftbridge_client, other) == []
    assert read_all(liftbridge_client, stream) == []
    # An empty 'stream' option was taken as absent: the rows went to their column's stream.
    by_column = spark.createDataFrame([("x", other)], "value string, stream string")
    with pytest.raises(Exception, match="option 'stream' is empty"):
        _writer(by_column, liftbridge_address, "").mode("append").save()
    # A sub-millisecond ack timeout failed every task after its rows were stored.
    with pytest.raises(Exception, match="option 'ackTimeoutMs' must be from 1 to"):
        _writer(df, liftbridge_address, stream).option("ackTimeoutMs", "0.001").mode(
            "append"
        ).save()
    assert read_all(liftbridge_client, other) == []
    assert read_all(liftbridge_client, stream) == []


_FAST = {"liftbridge.rpcTimeoutMs": "2000"}


def _fails_fast(action: Any, *names: str) -> None:
    """``action`` raises within 15 s (rpc timeout 2 s plus Spark) naming all ``names``."""
    started = time.monotonic()
    with pytest.raises(Exception) as err:
        action()
    elapsed = time.monotonic() - started
    text = f"{type(err.value).__name__}: {err.value}"
    assert all(name in text for name in names), text[-2000:]
    assert elapsed < 15, f"took {elapsed:.1f}s"


def test_writes_check_brokers_and_stream_on_the_driver(
    spark: Any, liftbridge_address: str, new_stream: StreamFactory, tmp_path: Path
) -> None:
    stream = new_stream()
    df = spark.createDataFrame([("x",)], "value string")
    unreachable = ("BrokerUnavailableError", "option 'brokers'", "127.0.0.1:1")
    missing = ("NoSuchStreamError", "option 'stream'", "no-such-stream")

    def batch(address: str, target: str) -> None:
        _writer(df, address, target).options(**_FAST).mode("append").save()

    _fails_fast(lambda: batch("127.0.0.1:1", stream), *unreachable)
    _fails_fast(lambda: batch(liftbridge_address, "no-such-stream"), *missing)

    def sink(address: str, target: str) -> None:
        publish_partition(address, target, client_options=_client(address))

    _fails_fast(lambda: sink("127.0.0.1:1", stream), *unreachable)
    _fails_fast(lambda: sink(liftbridge_address, "no-such-stream"), *missing)

    def streaming(address: str, target: str) -> None:
        query = (
            spark.readStream.format("rate")
            .load()
            .selectExpr("cast(value as string) as value")
            .writeStream.format("liftbridge")
            .option("brokers", address)
            .option("stream", target)
            .options(**_FAST)
            .option("checkpointLocation", str(tmp_path / target))
            .start()
        )
        try:
            query.awaitTermination(60)
        finally:
            query.stop()

    _fails_fast(lambda: streaming("127.0.0.1:1", stream), *unreachable)
    _fails_fast(lambda: streaming(liftbridge_address, "no-such-stream"), *missing)


def test_rows_the_tasks_could_not_publish_are_refused_on_the_driver(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """The writer is given the rows' schema on the driver. Without a check there, an
    empty DataFrame with no ``value`` column (or no stream at all) was "written"
    without a word, and a wrong column type failed only in every task attempt."""
    stream = new_stream()
    cases = [
        ("data string", "need a 'value' column", True),
        ("value string", "no target stream", False),
        ("value int", "column 'value' must be binary or string, got int", True),
        ("value string, partition string", "column 'partition' must be an integer", True),
        ("value string, headers string", "column 'headers' must be map", True),
        (
            "value string, headers array<struct<name:string,data:binary>>",
            "column 'headers' must be map",
            True,
        ),
    ]
    for ddl, error, with_stream in cases:
        empty = spark.createDataFrame([], ddl)
        writer = empty.write.format("liftbridge").option("brokers", liftbridge_address)
        if with_stream:
            writer = writer.option("stream", stream)
        with pytest.raises(Exception, match=re.escape(error)):
            writer.mode("append").save()
    # The shapes the sink takes still pass: Kafka's headers, a null partition column.
    ok = spark.createDataFrame(
        [("k", b"v", None, [("h", b"1")], "c1")],
        "key string, value binary, partition long, "
        "headers array<struct<key:string,value:binary>>, correlationId string",
    )
    _writer(ok, liftbridge_address, stream).mode("append").save()
    [message] = read_all(liftbridge_client, stream)
    assert (message.key, message.value, message.headers["h"]) == (b"k", b"v", b"1")


def _client(address: str) -> ClientOptions:
    return ClientOptions(addresses=(address,), rpc_timeout=2.0)


def test_keyed_rows_are_hashed_by_default(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    hashed, column, sunk = new_stream(partitions=3), new_stream(partitions=3), new_stream(3)
    df = spark.range(1000).selectExpr(
        "cast(concat('k', id) as binary) as key", "cast(id as string) as value"
    )
    _writer(df, liftbridge_address, hashed).mode("append").save()
    by_key = ByKey()
    for target in (hashed, sunk):
        if target == sunk:
            df.foreachPartition(publish_partition(liftbridge_address, sunk))
        messages = read_all(liftbridge_client, target)
        assert len(messages) == 1000
        assert {m.partition for m in messages} == {0, 1, 2}
        for m in messages:
            assert m.partition == by_key.partition(target, m.key, m.value, 3)
    _writer(df, liftbridge_address, column).option("partitioner", "partition-column").mode(
        "append"
    ).save()
    assert {m.partition for m in read_all(liftbridge_client, column)} == {0}


def test_plain_rows_are_published_in_runs_with_every_partitioner(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # Value-only rows and rows whose key is null go out a run at a time (publish_batch):
    # null keys land on partition 0 under the key partitioner, as ByKey puts them, and
    # round-robin spreads the rows; nothing is lost or duplicated either way.
    by_key, spread = new_stream(partitions=3), new_stream(partitions=3)
    df = spark.range(0, 3000, 1, 2).selectExpr(
        "case when id % 2 = 0 then null else cast(id as string) end as key",
        "cast(id as string) as value",
    )
    _writer(df, liftbridge_address, by_key).option("maxInFlight", "256").mode("append").save()
    messages = read_all(liftbridge_client, by_key)
    assert sorted(int(m.value) for m in messages) == list(range(3000))
    hashing = ByKey()
    for m in messages:
        expected = 0 if m.key is None else hashing.partition(by_key, m.key, m.value, 3)
        assert m.partition == expected
    assert {m.key is None for m in messages if m.partition in (1, 2)} == {False}
    values = df.select("value")
    _writer(values, liftbridge_address, spread).option("partitioner", "roundrobin").mode(
        "append"
    ).save()
    spread_messages = read_all(liftbridge_client, spread)
    assert sorted(int(m.value) for m in spread_messages) == list(range(3000))
    assert {m.partition for m in spread_messages} == {0, 1, 2}


def test_round_robin_goes_on_from_task_to_task(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # Each task made a RoundRobin of its own, which starts at partition 0: twenty
    # one-row tasks all landed on partition 0, by either write path.
    written, sunk = new_stream(partitions=3), new_stream(partitions=3)
    df = spark.range(0, 20, 1, 20).selectExpr("cast(id as string) as value")
    _writer(df, liftbridge_address, written).option("partitioner", "roundrobin").mode(
        "append"
    ).save()
    df.foreachPartition(publish_partition(liftbridge_address, sunk, partitioner="roundrobin"))
    for target in (written, sunk):
        messages = read_all(liftbridge_client, target)
        assert sorted(int(m.value) for m in messages) == list(range(20))
        counts = [sum(1 for m in messages if m.partition == p) for p in range(3)]
        assert min(counts) >= 1 and max(counts) <= 14, counts


def test_a_row_over_the_servers_payload_limit_fails_the_write_unless_ack_policy_none(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """What the README says of a value near the server's limit: over NATS's max_payload
    (1 MiB by default) the server refuses it and the write fails naming the row's size,
    the limit and the server's words (a plain row in a run, or one with headers sent on
    its own); with ackPolicy=none nothing is acknowledged, so it is dropped and the write
    succeeds."""
    stream = new_stream()
    rows = [(b"x" * 1_100_000,), (b"small",)]
    df = spark.createDataFrame(rows, "value binary").coalesce(1)
    refused = (
        rf"PublishRejectedError: stream '{re.escape(stream)}': a row of 1,100,000 bytes "
        r"\(value, key and headers\) is over the NATS server's max_payload "
        r"\(1,048,576 bytes.*maximum payload exceeded"
    )
    with pytest.raises(Exception, match=refused):
        _writer(df, liftbridge_address, stream).mode("append").save()
    with_headers = spark.createDataFrame(
        [(b"x" * 1_100_000, {"h": b"vv"})], "value binary, headers map<string,binary>"
    )
    with pytest.raises(Exception, match=refused.replace("1,100,000", "1,100,003")):
        _writer(with_headers, liftbridge_address, stream).mode("append").save()
    _writer(df, liftbridge_address, stream).option("ackPolicy", "none").mode("append").save()
    small = ("x",)
    _writer(spark.createDataFrame([small], "value string"), liftbridge_address, stream).mode(
        "append"
    ).save()  # acked, so everything before it on the partition is stored too
    values = [m.value for m in read_all(liftbridge_client, stream)]
    # The failed write's attempts published the row after the refused one (at least
    # once); the big row is nowhere.
    assert values[-2:] == [b"small", b"x"] and set(values) == {b"small", b"x"}
