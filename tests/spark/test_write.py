"""Batch writes through the ``liftbridge`` data source."""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_sync import Client
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
    with pytest.raises(Exception, match="unknown write option 'startingoffsets'"):
        _writer(df, liftbridge_address, stream).option("startingOffsets", "earliest").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="option 'ackPolicy' must be leader, all or none"):
        _writer(df, liftbridge_address, stream).option("ackPolicy", "most").mode("append").save()
    assert read_all(liftbridge_client, stream) == []
