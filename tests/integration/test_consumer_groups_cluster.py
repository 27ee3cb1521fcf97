"""Consumer groups in a real 3-node cluster whose group coordinator is killed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from liftbridge_sync import AckPolicy, Client, Message, StartAt
from liftbridge_sync.consumer import Consumer
from liftbridge_sync.testing import LiftbridgeCluster
from tests.waiting import wait_until

from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

FAST_RECONNECT = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LiftbridgeCluster]:
    config = {"groups.consumer.timeout": "3s", "groups.coordinator.timeout": "2s"}
    with LiftbridgeCluster(size=3, config=config) as c:
        yield c


def drain(consumer: Consumer, want: set[bytes], timeout: float) -> list[Message]:
    """Messages until every value of ``want`` arrived (others are kept too)."""
    got: list[Message] = []

    def more() -> bool:
        try:
            got.append(consumer.get(0.2))
        except TimeoutError:
            pass
        return want <= {m.value for m in got}

    wait_until(more, timeout, f"{len(want)} messages")
    return got


def test_coordinator_killed_a_new_one_takes_over_and_nothing_is_lost(
    cluster: LiftbridgeCluster,
) -> None:
    with Client(cluster.addresses, grpc_options=FAST_RECONNECT, ack_timeout=30.0) as client:
        stream = unique("gc")
        client.create_stream(stream, stream, partitions=2, replication_factor=3)
        for p in range(2):
            cluster.wait_for_partition_leader(stream, p)
        group = unique("g")
        with client.consumer(
            group, streams=[stream], auto_commit=0.3, start=StartAt.earliest()
        ) as consumer:
            wait_until(lambda: len(consumer.assignment()) == 2, 20, "assignment")
            coordinator, epoch = consumer.coordinator, consumer.epoch
            first = {f"first-{i}".encode() for i in range(20)}
            for i, value in enumerate(sorted(first)):
                client.publish(stream, value, partition=i % 2, ack_policy=AckPolicy.ALL)
            drain(consumer, first, 20)

            cluster.kill(cluster.index_of(coordinator))
            # The member reports the silent coordinator; being the whole group it is a
            # majority, so the metadata leader names another broker, at a newer epoch.
            wait_until(lambda: consumer.coordinator != coordinator, 60, "a new coordinator")
            assert consumer.epoch > epoch
            assert consumer.coordinator in {n.server_id for n in cluster.servers if n.running}

            second = {f"second-{i}".encode() for i in range(20)}
            for i, value in enumerate(sorted(second)):
                client.publish(stream, value, partition=i % 2, ack_policy=AckPolicy.ALL)
            got = drain(consumer, second, 60)
            # Polls reach the new coordinator: the member still owns both partitions.
            assert len(consumer.assignment()) == 2
            assert {m.value for m in got} >= second
