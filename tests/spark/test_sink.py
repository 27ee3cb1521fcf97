"""The foreachPartition sink against real PySpark and a real Liftbridge server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import Client, ConfigurationError
from liftbridge_sync.spark import publish_partition
from tests.integration.conftest import StreamFactory
from tests.spark._helpers import FailFirstAttempt, gated_rows, read_all
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def test_round_trip_100k_rows(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=3)
    n = 100_000
    df = spark.range(n).selectExpr(
        "cast(id as string) as key", "cast(concat('v-', id) as binary) as value"
    )
    df.foreachPartition(publish_partition(liftbridge_address, stream, partitioner="key"))
    messages = read_all(liftbridge_client, stream)
    assert len(messages) == n
    assert {m.value for m in messages} == {f"v-{i}".encode() for i in range(n)}
    # Key partitioning put every key on the partition go-liftbridge would choose.
    import zlib

    assert all(m.partition == zlib.crc32(m.key or b"") % 3 for m in messages)


def test_columns_map_to_message_fields(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream(partitions=2)
    rows = [
        ("k1", b"one", 1, {"h": "x", "s": "text"}, "corr-1"),
        (None, b"two", 0, None, None),
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers map<string,string>, correlationId string",
    )
    df.foreachPartition(publish_partition(liftbridge_address, stream))
    messages = sorted(read_all(liftbridge_client, stream), key=lambda m: m.value)
    assert [(m.value, m.key, m.partition) for m in messages] == [
        (b"one", b"k1", 1),
        (b"two", None, 0),
    ]
    assert messages[0].headers["h"] == b"x"
    assert messages[0].headers["s"] == b"text"


def test_rdd_of_values_and_stream_column(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    first, second = new_stream(), new_stream()
    spark.sparkContext.parallelize([f"r{i}" for i in range(50)], 2).foreachPartition(
        publish_partition(liftbridge_address, first)
    )
    df = spark.createDataFrame(
        [(first, "a"), (second, "b"), (second, "c")], "stream string, value string"
    )
    df.foreachPartition(publish_partition(liftbridge_address))
    assert sorted(m.value for m in read_all(liftbridge_client, first)) == sorted(
        [f"r{i}".encode() for i in range(50)] + [b"a"]
    )
    assert sorted(m.value for m in read_all(liftbridge_client, second)) == [b"b", b"c"]


def test_retried_task_loses_nothing_and_duplicates_are_counted(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    n = 2_000
    df = spark.range(0, n, 1, 2).selectExpr("cast(id as string) as value")
    df.foreachPartition(FailFirstAttempt(publish_partition(liftbridge_address, stream)))
    values = [m.value for m in read_all(liftbridge_client, stream)]
    assert set(values) == {str(i).encode() for i in range(n)}
    duplicates = len(values) - len(set(values))
    # Partition 0 was published twice in full (its first attempt failed after its acks).
    assert duplicates == n // 2, f"{duplicates} duplicates reported"


def test_bad_column_type_names_the_column(
    spark: Any, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    df = spark.createDataFrame([(1, b"x")], "partition string, value binary")
    with pytest.raises(Exception, match="column 'partition' must be an integer"):
        df.foreachPartition(publish_partition(liftbridge_address, stream))
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="column 'value' must be binary or string"):
        df.foreachPartition(publish_partition(liftbridge_address, stream))
    df = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="need a 'value' column"):
        df.foreachPartition(publish_partition(liftbridge_address, stream))


def test_header_structs_are_read_by_field_name(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """A header struct reaches the sink as a ``Row``, a tuple: unpacked by position,
    ``struct<value, key>`` swapped every header's name and value without a word."""
    stream = new_stream()
    df = spark.createDataFrame(
        [(b"v", [("x", "h")])], "value binary, headers array<struct<value:string,key:string>>"
    )
    df.foreachPartition(publish_partition(liftbridge_address, stream))
    [message] = read_all(liftbridge_client, stream)
    assert {k: v for k, v in message.headers.items() if k in ("h", "x")} == {"h": b"x"}


def test_bad_arguments_fail_on_the_driver() -> None:
    with pytest.raises(ConfigurationError, match="partitioner"):
        publish_partition("127.0.0.1:9292", "s", partitioner="random", check=False)
    with pytest.raises(ConfigurationError, match="max_in_flight"):
        publish_partition("127.0.0.1:9292", "s", max_in_flight=0, check=False)
    with pytest.raises(ConfigurationError, match="brokers"):
        publish_partition("", "s")


def test_server_stopped_mid_write_fails_the_task(spark: Any, tmp_path: Path) -> None:
    from liftbridge_sync.testing import LiftbridgeServer

    with LiftbridgeServer() as server, Client(server.address) as client:
        client.create_stream("mid", "mid")
        reached, gate = tmp_path / "reached", tmp_path / "gate"
        sink = publish_partition(
            server.address, "mid", client_options=_fast_failing(server.address)
        )
        rdd = spark.sparkContext.parallelize(range(4_000), 1).map(str)
        gated = rdd.mapPartitions(lambda rows: gated_rows(rows, 1_000, reached, gate))
        errors: list[BaseException] = []

        def run() -> None:
            try:
                gated.foreachPartition(sink)
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                errors.append(exc)

        job = threading.Thread(target=run)
        job.start()
        wait_until(reached.exists, 60, "the task to publish its first rows")
        server.stop()
        gate.touch()
        job.join(90)
        assert not job.is_alive(), "the Spark job hangs after the server stopped"
    assert errors, "the job succeeded although the server was stopped"
    text = str(errors[0])
    assert any(
        name in text for name in ("BrokerUnavailableError", "AckTimeoutError", "PublishError")
    ), text[-2000:]


def _fast_failing(address: str) -> Any:
    from liftbridge_sync import ClientOptions, RetryPolicy

    return ClientOptions(
        addresses=(address,),
        ack_timeout=2.0,
        rpc_timeout=2.0,
        enqueue_timeout=2.0,
        retry=RetryPolicy(max_attempts=3, max_delay=2.0),
    )
