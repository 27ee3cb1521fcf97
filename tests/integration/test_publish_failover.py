"""Pipelined publishing across a leader failover, a leader restart and a NATS restart.

A real 3-node cluster (RF 3, ack ALL), the default client options, 12,000 pipelined
``publish_async`` calls and a fault after about a third of them. Each run must end with
0 failed futures, every message readable (duplicates are allowed: delivery is
at-least-once, and the re-sends that may cause them are counted), and a stall far below
the ack timeout. The figures are printed (``pytest -s``) for README's Reliability table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest

from liftbridge_sync import Ack, AckPolicy, Client, Message
from liftbridge_sync.testing import LiftbridgeCluster

from ._rewrites import Where, judge_missing, log_of
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

MESSAGES = 12_000
FAULT_AT = 4_000
#: Far below the default ack timeout (30 s): a stall this long means the re-send worked.
MAX_STALL = 15.0


class _Run:
    """Publishes ``MESSAGES`` values, calling ``fault`` after ``FAULT_AT``."""

    def __init__(self, client: Client, stream: str, partition: int | None = None) -> None:
        self.client = client
        self.stream = stream
        self.partition = partition
        self.done_at: list[float] = []
        self._lock = threading.Lock()

    def _record(self, _: Future[Ack | None]) -> None:
        with self._lock:
            self.done_at.append(time.monotonic())

    def publish(self, fault: Callable[[], object]) -> list[Future[Ack | None]]:
        futures: list[Future[Ack | None]] = []
        for i in range(MESSAGES):
            future = self.client.publish_async(
                self.stream, b"%d" % i, partition=self.partition, ack_policy=AckPolicy.ALL
            )
            future.add_done_callback(self._record)
            futures.append(future)
            if i == FAULT_AT:
                fault()
        return futures

    def longest_stall(self) -> float:
        with self._lock:
            times = sorted(self.done_at)
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


@pytest.fixture(autouse=True)
def publisher_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    """A failure's report shows every probe of the silent partitions and its verdict."""
    caplog.set_level(logging.DEBUG, logger="liftbridge_sync.publisher")


def check_all_read_back(read: dict[Where, Message], futures: list[Future[Ack | None]]) -> None:
    """Every published value (``b"%d" % index``) is in the log ``read`` (see
    ``_rewrites.judge_missing`` for what a missing one means)."""
    values = {int(m.value) for m in read.values()}
    missing = sorted(set(range(len(futures))) - values)
    judge_missing({b"%d" % v: futures[v].result(timeout=0) for v in missing}, read)


def _check(client: Client, run: _Run, futures: list[Future[Ack | None]], what: str) -> None:
    failed = [f.exception(timeout=60) for f in futures]
    failed = [e for e in failed if e is not None]
    assert not failed, f"{len(failed)} failed, e.g. {failed[:3]}; {client.publisher_stats()}"
    read = log_of(client, run.stream, 1)
    check_all_read_back(read, futures)
    values = list(read.values())
    stats = client.publisher_stats()
    stall = run.longest_stall()
    print(
        f"\n{what}: {MESSAGES} published, 0 failed, 0 lost, "
        f"{len(values) - MESSAGES} duplicates, longest stall {stall:.2f}s, {stats}"
    )
    assert stall < MAX_STALL
    assert stats.in_flight == 0


@pytest.fixture
def replicated(liftbridge_cluster: LiftbridgeCluster) -> Iterator[tuple[str, int]]:
    """A stream with RF 3 and its leader's index; the cluster is whole again afterwards.

    The stream is not deleted: v1.9.0 panics in a follower still replicating a stream
    being deleted, and the next test would find the cluster without a quorum.
    """
    cluster = liftbridge_cluster
    cluster.heal()
    name = unique()
    with Client(cluster.addresses) as admin:
        admin.create_stream(name, name, replication_factor=3)
        leader = cluster.wait_for_partition_leader(name, 0)
        yield name, leader
        cluster.heal()
        cluster.wait_ready()


def test_leader_killed_mid_publish_nothing_fails(
    liftbridge_cluster: LiftbridgeCluster, replicated: tuple[str, int]
) -> None:
    cluster = liftbridge_cluster
    name, leader = replicated
    failover: list[float] = []

    def kill_and_time_the_election() -> None:
        # The cluster's own failover time, for comparison with the publishers' stall.
        def watch(killed_at: float) -> None:
            cluster.wait_for_new_leader(name, 0, leader)
            failover.append(time.monotonic() - killed_at)

        cluster.kill(leader)
        watcher = threading.Thread(target=watch, args=(time.monotonic(),), daemon=True)
        watcher.start()
        watchers.append(watcher)

    watchers: list[threading.Thread] = []
    with Client(cluster.addresses) as client:
        run = _Run(client, name)
        futures = run.publish(kill_and_time_the_election)
        _check(client, run, futures, "leader SIGKILLed")
        for watcher in watchers:
            watcher.join(30)
        assert failover, "no new leader was elected"
        print(f"cluster failover (kill to new leader in metadata): {failover[0]:.2f}s")
        # The publishes lost with the old leader were noticed and sent again.
        assert client.publisher_stats().resent > 0


def test_leader_killed_under_the_publish_stream_nothing_fails(
    liftbridge_cluster: LiftbridgeCluster, replicated: tuple[str, int]
) -> None:
    cluster = liftbridge_cluster
    name, leader = replicated
    # Seeds only, leader first, and an explicit partition (no metadata needed): the
    # publish stream opens on the leader, so killing it also ends the stream.
    others = [a for i, a in enumerate(cluster.addresses) if i != leader]
    with Client([cluster.addresses[leader], *others]) as client:
        run = _Run(client, name, partition=0)
        futures = run.publish(lambda: cluster.kill(leader))
        _check(client, run, futures, "leader under the stream SIGKILLed")
        stats = client.publisher_stats()
        assert stats.connects >= 2
        assert stats.resent_after_reconnect > 0


def test_leader_restarted_mid_publish_nothing_fails(
    liftbridge_cluster: LiftbridgeCluster, replicated: tuple[str, int]
) -> None:
    cluster = liftbridge_cluster
    name, leader = replicated
    with Client(cluster.addresses) as client:
        run = _Run(client, name)
        futures = run.publish(lambda: cluster.restart(leader, kill=True))
        _check(client, run, futures, "leader SIGKILLed and restarted")


def test_nats_restarted_mid_publish_nothing_fails(
    liftbridge_cluster: LiftbridgeCluster, replicated: tuple[str, int]
) -> None:
    cluster = liftbridge_cluster
    name, _ = replicated
    with Client(cluster.addresses) as client:
        run = _Run(client, name)
        futures = run.publish(cluster.restart_nats)
        _check(client, run, futures, "NATS restarted")
        # While NATS was down the brokers refused publishes, or lost them: either way
        # they went again.
        assert client.publisher_stats().resent > 0


def test_a_broker_leading_several_partitions_killed_nothing_fails(
    liftbridge_cluster: LiftbridgeCluster,
) -> None:
    # Six partitions over three nodes; the node that leads the most of them (on v1.9.0
    # often all six) is killed, and their publishes all go silent at once.
    cluster = liftbridge_cluster
    cluster.heal()
    name = unique()
    partitions = 6
    with Client(cluster.addresses) as client:
        client.create_stream(name, name, partitions=partitions, replication_factor=3)
        leaders = [cluster.wait_for_partition_leader(name, p) for p in range(partitions)]
        victim = max(set(leaders), key=leaders.count)
        try:
            futures = []
            for i in range(6_000):
                futures.append(
                    client.publish_async(
                        name, b"%d" % i, partition=i % partitions, ack_policy=AckPolicy.ALL
                    )
                )
                if i == 2_000:
                    cluster.kill(victim)
            failed = [e for e in (f.exception(timeout=60) for f in futures) if e is not None]
            assert not failed, f"{len(failed)} failed, e.g. {failed[:3]}"
            check_all_read_back(log_of(client, name, partitions), futures)
            stats = client.publisher_stats()
            print(f"\n{leaders.count(victim)} of {partitions} partitions' leader killed: {stats}")
            assert stats.resent > 0
        finally:
            cluster.start_node(victim)
            cluster.wait_ready()  # the stream stays: see ``replicated``
