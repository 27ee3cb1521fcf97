"""Spark figures: write and read rows/s through Spark against the plain client.

Run: ``.venv/bin/python -m bench.spark [--rows 100000] [--size 256] [--rounds 2]``.
Starts its own Liftbridge server (harness) and a ``local[2]`` SparkSession and prints a
Markdown table; the best round of each measurement counts. Every measurement uses the
same rows (``--rows`` messages of ``--size`` bytes, keyed) on one-partition streams:

* writes: the plain client (``publish_async`` + ``flush``, one process), the
  ``foreachPartition`` sink (2 tasks) and ``df.write.format("liftbridge")`` (2 tasks);
* reads: the plain client (one subscription, one process) and
  ``spark.read.format("liftbridge")`` with one task and split over two
  (``minPartitions=2``);
* conversion: messages to Arrow in this process, the connector's column builder against
  PySpark's own conversion of row tuples (what a tuple-yielding reader costs);
* Spark alone, with no Liftbridge in it (the floor any connector pays): a
  ``foreachPartition`` that only iterates the same rows, and a Python data source that
  yields the same number of 256-byte rows from memory as Arrow batches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from liftbridge_sync import Client, Message, StartAt, StopAt
from liftbridge_sync.spark import publish_partition
from liftbridge_sync.testing import LiftbridgeServer


def _session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _plain_write(client: Client, stream: str, rows: int, size: int) -> float:
    pad = b"x" * size
    start = time.perf_counter()
    for i in range(rows):
        client.publish_async(stream, b"%d" % i + pad[: size - 8], key=b"%d" % i)
    client.flush(timeout=120)
    return rows / (time.perf_counter() - start)


def _frame(spark: Any, rows: int, size: int) -> Any:
    return spark.range(0, rows, 1, 2).selectExpr(
        "cast(id as string) as key",
        f"cast(rpad(cast(id as string), {size}, 'x') as binary) as value",
    )


def _sink(spark: Any, address: str, stream: str, rows: int, size: int) -> float:
    df = _frame(spark, rows, size)
    start = time.perf_counter()
    df.foreachPartition(publish_partition(address, stream))
    return rows / (time.perf_counter() - start)


def _ds_write(spark: Any, address: str, stream: str, rows: int, size: int) -> float:
    df = _frame(spark, rows, size)
    start = time.perf_counter()
    df.write.format("liftbridge").option("brokers", address).option("stream", stream).mode(
        "append"
    ).save()
    return rows / (time.perf_counter() - start)


def _floor_sink(spark: Any, rows: int, size: int) -> float:
    df = _frame(spark, rows, size)

    def iterate(partition: Any) -> None:
        for row in partition:
            row[0], row[1]

    start = time.perf_counter()
    df.foreachPartition(iterate)
    return rows / (time.perf_counter() - start)


def _floor_source(rows: int, size: int) -> type:
    """A Python data source of ``rows`` rows (offset, value) that reads nothing."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class FloorReader(DataSourceReader):
        def read(self, partition: Any) -> Any:
            import pyarrow as pa

            values = pa.array([b"x" * size] * 1024, type=pa.binary())
            for first in range(0, rows, 1024):
                count = min(1024, rows - first)
                offsets = pa.array(range(first, first + count), type=pa.int64())
                yield pa.RecordBatch.from_arrays(
                    [offsets, values.slice(0, count)], names=["offset", "value"]
                )

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-floor"

        def schema(self) -> str:
            return "offset long, value binary"

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    return FloorSource


def _floor_read(spark: Any, rows: int) -> float:
    start = time.perf_counter()
    got = (
        spark.read.format("bench-floor")
        .load()
        .selectExpr("count(*) as n", "sum(length(value)) as bytes")
        .collect()
    )
    elapsed = time.perf_counter() - start
    assert got[0].n == rows, (got[0].n, rows)
    return rows / elapsed


def _plain_read(client: Client, stream: str, rows: int) -> float:
    start = time.perf_counter()
    count = size = 0
    with client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        for message in sub:
            count += 1
            size += len(message.value)
    elapsed = time.perf_counter() - start
    assert count == rows, (count, rows)
    return rows / elapsed


def _read(spark: Any, address: str, stream: str, rows: int, tasks: int = 1) -> float:
    start = time.perf_counter()
    reader = spark.read.format("liftbridge").option("brokers", address)
    if tasks > 1:
        reader = reader.option("minPartitions", str(tasks))
    got = reader.load(stream).selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()
    elapsed = time.perf_counter() - start
    assert got[0].n == rows, (got[0].n, rows)
    return rows / elapsed


def _conversion(client: Client, stream: str) -> tuple[float, float]:
    """Rows/s turning the stream's messages into Arrow: the connector vs PySpark's."""
    from pyspark.sql.types import StructType, _parse_datatype_string
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from liftbridge_sync.models import wire_message
    from liftbridge_sync.spark.arrow import arrow_schema, record_batches
    from liftbridge_sync.spark.datasource import LiftbridgeDataSource
    from liftbridge_sync.spark.ranges import row_of
    from liftbridge_sync.spark.schema import schema_ddl

    with client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        messages: list[Message] = list(sub)
    schema = _parse_datatype_string(schema_ddl(False))
    assert isinstance(schema, StructType)
    target = arrow_schema(schema)

    def timed(convert: Callable[[], int]) -> float:
        start = time.perf_counter()
        count = convert()
        assert count == len(messages)
        return count / (time.perf_counter() - start)

    wire = [wire_message(m) for m in messages]  # what the connector's reader gets
    ours = timed(
        lambda: sum(b.num_rows for b in record_batches([wire], target, stream=stream, partition=0))
    )
    source = LiftbridgeDataSource({})
    theirs = timed(
        lambda: sum(
            b.num_rows
            for b in records_to_arrow_batches(
                (row_of(m, False) for m in messages), 10_000, schema, source
            )
        )
    )
    return ours, theirs


_LABELS = {
    "plain_write": "plain client write, one process, `publish_async` + `flush`",
    "sink": "`foreachPartition(publish_partition(...))`, 2 tasks",
    "ds_write": '`df.write.format("liftbridge")`, 2 tasks',
    "plain_read": "plain client read, one process, one subscription",
    "read": '`spark.read.format("liftbridge")`, 1 task',
    "read2": '`spark.read.format("liftbridge")`, `minPartitions=2` (2 tasks)',
    "floor_sink": "Spark alone: `foreachPartition` only iterating the rows, 2 tasks",
    "floor_read": "Spark alone: a Python data source yielding the rows from memory, 1 task",
    "arrow": "messages to Arrow: the connector's column builder (in process)",
    "tuples": "messages to Arrow: row tuples through PySpark's conversion (in process)",
}


def main() -> int:
    """Run the measurements and print a table."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    spark = _session()
    spark.dataSource.register(_floor_source(args.rows, args.size))
    results: dict[str, list[float]] = {key: [] for key in _LABELS}
    load_start = os.getloadavg()[0]
    with LiftbridgeServer() as server, Client(server.address) as client:

        def fresh() -> str:
            name = f"bench-spark-{uuid.uuid4().hex[:8]}"
            client.create_stream(name, name)
            return name

        warm = fresh()
        _sink(spark, server.address, warm, 2_000, args.size)  # start the Python workers
        _read(spark, server.address, warm, 2_000)
        tiny = fresh()
        _plain_write(client, tiny, 10, args.size)
        fixed: list[float] = []
        for _ in range(args.rounds):
            fixed.append(10 / _read(spark, server.address, tiny, 10))
            stream = fresh()
            results["plain_write"].append(_plain_write(client, stream, args.rows, args.size))
            results["plain_read"].append(_plain_read(client, stream, args.rows))
            results["read"].append(_read(spark, server.address, stream, args.rows))
            results["read2"].append(_read(spark, server.address, stream, args.rows, 2))
            results["floor_read"].append(_floor_read(spark, args.rows))
            results["floor_sink"].append(_floor_sink(spark, args.rows, args.size))
            ours, theirs = _conversion(client, stream)
            results["arrow"].append(ours)
            results["tuples"].append(theirs)
            results["sink"].append(_sink(spark, server.address, fresh(), args.rows, args.size))
            written = fresh()
            results["ds_write"].append(
                _ds_write(spark, server.address, written, args.rows, args.size)
            )
    spark.stop()
    print(
        f"rows={args.rows} size={args.size}B rounds={args.rounds} "
        f"load1={load_start:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print("| measurement | best rows/s | all rounds |")
    print("|---|---|---|")
    for key, label in _LABELS.items():
        rounds = ", ".join(f"{r:,.0f}" for r in results[key])
        print(f"| {label} | {max(results[key]):,.0f} | {rounds} |")

    costs = ", ".join(f"{f:.2f}" for f in fixed)
    print(f"\nfixed cost of one read query (10 rows), seconds: best {min(fixed):.2f} ({costs})")

    def ratio(a: str, b: str) -> str:
        return f"{max(results[a]) / max(results[b]):.2f}"

    # The machine's speed drifts between rounds: each round's own ratio, and their median.
    print("\npaired ratios (each round's own; median):")
    for a, b in [
        ("sink", "plain_write"),
        ("ds_write", "plain_write"),
        ("read", "plain_read"),
        ("read2", "plain_read"),
    ]:
        paired = [x / y for x, y in zip(results[a], results[b], strict=True)]
        listed = ", ".join(f"{r:.2f}" for r in paired)
        print(f"  {a} / {b}: {listed}; median {statistics.median(paired):.2f}")

    print(
        f"sink / plain write = {ratio('sink', 'plain_write')}, "
        f"data-source write / plain write = {ratio('ds_write', 'plain_write')}, "
        f"read 1 task / plain read = {ratio('read', 'plain_read')}, "
        f"read 2 tasks / plain read = {ratio('read2', 'plain_read')}, "
        f"sink / Spark alone = {ratio('sink', 'floor_sink')}, "
        f"read 1 task / Spark alone = {ratio('read', 'floor_read')}, "
        f"Arrow builder / PySpark tuples = {ratio('arrow', 'tuples')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
