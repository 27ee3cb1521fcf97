"""Publish a DataFrame to Liftbridge from Spark, then read it back as a DataFrame.

Needs the ``spark`` extra (``pip install 'liftbridge-sync[spark]'``) and Java 17+.
``publish_partition`` gives ``foreachPartition`` a function that publishes each row
through one client per Spark worker process and waits for every ack (at-least-once).
"""

from __future__ import annotations

import uuid
from typing import Any

from _address import server_address

from liftbridge_sync import Client
from liftbridge_sync.spark import publish_partition


def run(spark: Any, address: str) -> None:
    """Publish 1000 orders keyed by customer, then count them per partition."""
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    with Client(address) as client:
        client.create_stream(stream, stream, partitions=3)
    orders = spark.range(1000).selectExpr(
        "concat('customer-', id % 25) as key",  # same customer -> same partition
        "concat('order ', id) as value",
        "map('source', 'spark-example') as headers",
    )
    orders.foreachPartition(publish_partition(address, stream, partitioner="key"))
    print(f"published 1000 orders to {stream}")

    df = spark.read.format("liftbridge").option("brokers", address).load(stream)
    for row in df.groupBy("partition").count().orderBy("partition").collect():
        print(f"partition {row['partition']}: {row['count']} orders")
    first = df.filter("partition = 0 and offset = 0").first()
    print(
        f"first on partition 0: key={bytes(first.key).decode()} value={bytes(first.value).decode()}"
    )


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").appName("liftbridge-sink").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run(spark, server_address())
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
