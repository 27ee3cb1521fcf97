"""Publishing through a rolling restart of the node that leads a 3-partition stream.

A real 3-node cluster, one stream of 3 partitions at replication factor 3, and two
publishers: a thread of pipelined ack-ALL ``publish_async`` calls and a thread calling
``publish()``, and a subscriber per partition. The node leading most partitions is
stopped with SIGINT (v1.9.0's graceful stop: it sends no GOAWAY), SIGTERM (it dies at
once) or SIGKILL, and started again either at once ("fast") or once its partitions have
new leaders ("slow"). Each run must end with 0 failed publishes, every acknowledged
message readable, each partition's offsets in strictly increasing order, and the
subscribers, reading all along, having seen every stored offset in order.
Duplicates (at-least-once re-sends, and what a restarted leader stored but never acked)
and the longest stall are printed (``pytest -s``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, Message
from liftbridge_sync.testing import LiftbridgeCluster

from ._publishers import Publishers, Subscribers, read_back
from ._rewrites import Where, judge_missing
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PARTITIONS = 3
#: Seconds of publishing after the node is back (its partitions' traffic returns).
AFTER = 2.0


@pytest.fixture
def stream3(liftbridge_cluster: LiftbridgeCluster) -> Iterator[str]:
    """A 3-partition RF 3 stream; the cluster is whole again afterwards.

    The stream is not deleted: v1.9.0 panics in a follower still replicating a stream
    being deleted, and the next test would find the cluster without a quorum.
    """
    cluster = liftbridge_cluster
    cluster.heal()
    name = unique()
    with Client(cluster.addresses) as admin:
        admin.create_stream(name, name, partitions=PARTITIONS, replication_factor=3)
        for partition in range(PARTITIONS):
            cluster.wait_for_partition_leader(name, partition)
        yield name
        cluster.heal()
        cluster.wait_ready()


@pytest.mark.parametrize("pace", ["fast", "slow"])
@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_restarting_the_leading_node_fails_and_loses_nothing(
    liftbridge_cluster: LiftbridgeCluster, stream3: str, signum: signal.Signals, pace: str
) -> None:
    cluster = liftbridge_cluster
    leaders = [cluster.partition_leader(stream3, p) for p in range(PARTITIONS)]
    victim = max(set(leaders), key=leaders.count)
    # The publish connection opens on the metadata's first broker: on the victim or
    # elsewhere, which the runs vary.
    with Client(cluster.addresses) as client, Subscribers(client, stream3, PARTITIONS) as readers:
        client.fetch_metadata(stream3)
        with Publishers(client, stream3, PARTITIONS) as run:
            deadline = time.monotonic() + 30
            while len(run.futures) < 2_000 and time.monotonic() < deadline:
                run.stop.wait(0.05)
            down_at = time.monotonic()
            cluster.servers[victim].end_with(signum)
            if pace == "slow":
                for partition in range(PARTITIONS):
                    if leaders[partition] == victim:
                        cluster.wait_for_new_leader(stream3, partition, victim)
            cluster.start_node(victim)
            back_at = time.monotonic()
            run.stop.wait(AFTER)
        failed = [e for e in (f.exception(timeout=60) for f in run.futures) if e is not None]
        stats = client.publisher_stats()
        offsets: dict[int, list[int]] = {}
        log: dict[Where, Message] = {}
        stored = read_back(client, stream3, PARTITIONS, offsets, log)
        readers.finish({p: o[-1] if o else -1 for p, o in offsets.items()}, timeout=30)
    acked = {b"a%d" % i for i in range(len(run.futures))}
    acked |= {value for value, _ in run.sync_acks}
    missing = acked - set(stored)
    print(
        f"\n{signum.name} {pace}: {len(run.futures)} publish_async + {len(run.sync_acks)} "
        f"publish(); node down for {back_at - down_at:.1f}s; longest stall "
        f"{run.longest_stall():.2f}s; {len(stored) - len(set(stored))} duplicates; {stats}"
    )
    assert not failed, f"{len(failed)} publish_async failed, e.g. {failed[:3]}"
    assert not run.sync_errors, f"{len(run.sync_errors)} publish() raised: {run.sync_errors[:3]}"
    judge_missing(run.acks_of(missing), log)
    assert stats.in_flight == 0
    # The subscribers, reading all along, saw every stored offset, in order.
    assert not readers.errors, readers.errors
    assert readers.offsets == offsets
