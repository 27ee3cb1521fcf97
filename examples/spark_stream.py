"""Structured Streaming: Liftbridge stream -> uppercase -> another Liftbridge stream.

Needs the ``spark`` extra and Java 17+. The query runs with ``availableNow`` (read
what is there, then stop) and a checkpoint: run it again and it continues exactly
where it stopped, reading only messages published since.
"""

from __future__ import annotations

import tempfile
import uuid
from typing import Any

from _address import server_address

from liftbridge_sync import Client, StartAt, StopAt


def _copy(spark: Any, address: str, source: str, target: str, checkpoint: str) -> int:
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", address)
        .option("stream", source)
        .option("startingOffsets", "earliest")  # only for the first run; then the checkpoint
        .option("maxOffsetsPerTrigger", "50")
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("liftbridge")
        .option("brokers", address)
        .option("stream", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    return sum(p["numInputRows"] for p in query.recentProgress)


def run(spark: Any, address: str) -> None:
    """Copy a stream twice with one checkpoint; the second run copies only new messages."""
    source, target = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("events", "shouted"))
    with Client(address) as client, tempfile.TemporaryDirectory() as checkpoint:
        for name in (source, target):
            client.create_stream(name, name)
        for i in range(100):
            client.publish_async(source, f"event {i}".encode())
        client.flush()
        print(f"first run copied {_copy(spark, address, source, target, checkpoint)} messages")
        for i in range(100, 110):
            client.publish_async(source, f"event {i}".encode())
        client.flush()
        print(f"second run copied {_copy(spark, address, source, target, checkpoint)} messages")
        hw = client.fetch_partition_metadata(target, 0).high_watermark
        with client.subscribe(target, start=StartAt.offset(hw), stop=StopAt.offset(hw)) as sub:
            print(f"{target} has {hw + 1} messages, the last: {next(iter(sub)).value.decode()}")


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").appName("liftbridge-stream").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run(spark, server_address())
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
