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

from liftbridge_sync import Client, NoSuchStreamError
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


def test_a_failed_run_fails_the_task_and_leaves_no_thread(
    publish: Callable[..., PartitionPublisher],
) -> None:
    sink = publish("no-such-stream-for-the-sink", partitioner="roundrobin", check=False)
    with pytest.raises(NoSuchStreamError):
        sink.publish([b"a", b"b", b"c"])
    assert not _run_threads()
