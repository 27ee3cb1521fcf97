"""The ``foreachPartition`` sink's runs, called in this process against a real server.

A run of plain rows is published on a ``liftbridge-spark-run`` thread while the next is
gathered: the rows of a partition must keep their order across runs and single
publishes, every failure must reach the task, and no run thread may outlive the call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from liftbridge_sync import Client, ConfigurationError, NoSuchStreamError
from liftbridge_sync.spark import PartitionPublisher, publish_partition
from liftbridge_sync.testing import LiftbridgeEndpoint
from tests.integration.conftest import StreamFactory
from tests.spark._helpers import read_all

pytestmark = pytest.mark.integration


@pytest.fixture
def publish(liftbridge_server: LiftbridgeEndpoint) -> Iterator[Callable[..., PartitionPublisher]]:
    """``publish_partition`` for this server; the process's shared client it used is
    closed afterwards (a Spark worker keeps it; a test must not leak its threads)."""
    made: list[PartitionPublisher] = []

    def make(stream: str, **options: Any) -> PartitionPublisher:
        made.append(publish_partition(liftbridge_server.address, stream, **options))
        return made[-1]

    yield make
    for sink in made:
        Client.for_process(sink.options.client).close()


def _run_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-spark-run"]


def test_runs_and_single_rows_keep_their_order(
    publish: Callable[..., PartitionPublisher], liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    stream = new_stream()
    rows: list[dict[str, object]] = []
    for i in range(6_000):
        # Keyed: a run's requests are framed in Python, slowly enough for a row published
        # on its own too early to overtake them.
        row: dict[str, object] = {"value": b"%d" % i, "key": b"k", "correlationId": None}
        if i % 1_021 == 1_020:  # rows that cannot join a run, each after a long one
            row["correlationId"] = f"single-{i}"
        rows.append(row)
    sink = publish(stream, partitioner="partition-column")
    summary = sink.publish(rows)
    assert summary.count == 6_000
    assert summary.acked == {stream: {0: [0, 5_999]}}
    assert [m.value for m in read_all(liftbridge_client, stream)] == [
        b"%d" % i for i in range(6_000)
    ]
    assert not _run_threads()


def test_plain_rows_keep_their_order_and_cells_among_other_kinds_of_rows(
    publish: Callable[..., PartitionPublisher], liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    from pyspark.sql import Row

    stream = new_stream()
    plain = Row("key", "value", "ignored")
    rows: list[Any] = []
    expected: list[tuple[bytes | None, bytes]] = []
    for i in range(3_000):
        if i % 997 == 500:  # a mapping and a bare value in between: each joins the run
            rows.append({"value": f"m{i}", "key": None})
            expected.append((None, b"m%d" % i))
            continue
        if i % 1_499 == 700:
            rows.append(b"bare%d" % i)
            expected.append((None, b"bare%d" % i))
            continue
        key = [None, f"k{i}", b"b%d" % i, ""][i % 4]  # null, str, bytes, empty
        value = f"s{i}" if i % 3 else bytearray(b"y%d" % i)
        rows.append(plain(key, value, i))
        stored_key = key.encode() if isinstance(key, str) else key
        stored_value = value.encode() if isinstance(value, str) else bytes(value)
        expected.append((stored_key or None, stored_value))
    summary = publish(stream, partitioner="partition-column").publish(rows)
    assert summary.count == 3_000
    assert summary.acked == {stream: {0: [0, 2_999]}}
    assert [(m.key, m.value) for m in read_all(liftbridge_client, stream)] == expected
    assert not _run_threads()


def test_a_bad_cell_in_a_plain_row_names_its_column(
    publish: Callable[..., PartitionPublisher], new_stream: StreamFactory
) -> None:
    from pyspark.sql import Row

    plain = Row("key", "value")
    sink = publish(new_stream())
    with pytest.raises(ConfigurationError, match="column 'value' must be binary or string"):
        sink.publish([plain("k", b"ok"), plain("k", b"ok"), plain("k", 3)])
    with pytest.raises(ConfigurationError, match="column 'key' must be binary or string"):
        sink.publish([plain("k", b"ok"), plain(4.5, b"v")])
    assert not _run_threads()


def test_a_failed_run_fails_the_task_and_leaves_no_thread(
    publish: Callable[..., PartitionPublisher],
) -> None:
    sink = publish("no-such-stream-for-the-sink", partitioner="roundrobin", check=False)
    with pytest.raises(NoSuchStreamError):
        sink.publish([b"a", b"b", b"c"])
    assert not _run_threads()
