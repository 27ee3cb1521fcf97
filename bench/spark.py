"""Spark figures: rows/s through the sink vs the plain client, and data-source reads.

Run: ``.venv/bin/python -m bench.spark [--rows 200000] [--size 256] [--rounds 3]``.
Starts its own Liftbridge server (harness) and a ``local[2]`` SparkSession. Prints a
Markdown table; the best round of each measurement counts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

from liftbridge_sync import Client
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


def _plain(client: Client, stream: str, rows: int, size: int) -> float:
    pad = b"x" * size
    start = time.perf_counter()
    for i in range(rows):
        client.publish_async(stream, b"%d" % i + pad[: size - 8], key=b"%d" % i)
    client.flush(timeout=120)
    return rows / (time.perf_counter() - start)


def _sink(spark: Any, address: str, stream: str, rows: int, size: int) -> float:
    df = spark.range(0, rows, 1, 2).selectExpr(
        "cast(id as string) as key",
        f"cast(rpad(cast(id as string), {size}, 'x') as binary) as value",
    )
    start = time.perf_counter()
    df.foreachPartition(publish_partition(address, stream))
    return rows / (time.perf_counter() - start)


def _read(spark: Any, address: str, stream: str, rows: int) -> float:
    start = time.perf_counter()
    df = spark.read.format("liftbridge").option("brokers", address).load(stream)
    got = df.selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()[0]
    elapsed = time.perf_counter() - start
    assert got.n == rows, (got.n, rows)
    return rows / elapsed


def main() -> int:
    """Run the three measurements and print a table."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = _session()
    results: dict[str, list[float]] = {"plain": [], "sink": [], "read": []}
    with LiftbridgeServer() as server, Client(server.address) as client:

        def fresh(partitions: int) -> str:
            name = f"bench-spark-{uuid.uuid4().hex[:8]}"
            client.create_stream(name, name, partitions=partitions)
            return name

        warm = fresh(1)
        _sink(spark, server.address, warm, 2_000, args.size)  # start the Python workers
        _read(spark, server.address, warm, 2_000)
        for _ in range(args.rounds):
            results["plain"].append(_plain(client, fresh(1), args.rows, args.size))
            stream = fresh(1)
            results["sink"].append(_sink(spark, server.address, stream, args.rows, args.size))
            results["read"].append(_read(spark, server.address, stream, args.rows))
    spark.stop()
    load = os.getloadavg()[0]
    print(f"rows={args.rows} size={args.size}B rounds={args.rounds} load1={load:.1f}")
    print("| measurement | best rows/s | all rounds |")
    print("|---|---|---|")
    labels = {
        "plain": "plain client, one process, publish_async + flush",
        "sink": "foreachPartition sink, local[2], 2 tasks",
        "read": "data source batch read, local[2]",
    }
    for key, label in labels.items():
        rounds = ", ".join(f"{r:,.0f}" for r in results[key])
        print(f"| {label} | {max(results[key]):,.0f} | {rounds} |")
    ratio = max(results["sink"]) / max(results["plain"])
    print(f"\nsink / plain = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
