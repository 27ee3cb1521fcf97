"""Consumer groups in a real 3-node cluster whose group coordinator is killed."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator

import pytest

from liftbridge_sync import (
    Ack,
    AckPolicy,
    Client,
    LiftbridgeError,
    Message,
    ServerError,
    StartAt,
    StreamExistsError,
)
from liftbridge_sync.consumer import Consumer
from liftbridge_sync.testing import LiftbridgeCluster
from tests.constants import FAST_RECONNECT
from tests.waiting import wait_until

from ._members import Reader, undelivered_report
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LiftbridgeCluster]:
    config = {"groups.consumer.timeout": "3s", "groups.coordinator.timeout": "2s"}
    # No activity stream: a v1.9.0 metadata leader (re)creates it on each promotion, and
    # one that loses the leadership meanwhile panics ("error on metadata leadership step
    # down"), seen once in a run of repeated kills; groups do not need it.
    with LiftbridgeCluster(size=3, config=config, activity=False) as c:
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


KILLS = 5


class Publisher:
    """Publishes numbered values round-robin over the partitions until stopped.

    Keeps the values the cluster acknowledged (``AckPolicy.ALL``); a publish that failed
    while a broker was down is not retried (it may or may not be stored).
    """

    def __init__(self, client: Client, stream: str, partitions: int) -> None:
        #: The ack of each acknowledged value.
        self.acks: dict[bytes, Ack] = {}
        self.failed = 0
        self._client, self._stream, self._partitions = client, stream, partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"v-{i}".encode()
            try:
                ack = self._client.publish(
                    self._stream, value, partition=i % self._partitions, ack_policy=AckPolicy.ALL
                )
                assert ack is not None  # AckPolicy.ALL
                self.acks[value] = ack
            except LiftbridgeError:
                self.failed += 1
            i += 1
            self._stop.wait(0.01)  # pace, not synchronisation: about 100 messages/s

    @property
    def acked(self) -> set[bytes]:
        """The acknowledged values."""
        return set(self.acks)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive()


def create_once_led(client: Client, stream: str) -> None:
    """Create the 4-partition stream, waiting out a metadata leader election.

    The node just restarted may have been the metadata leader (the test before kills
    one); until the others elect another, a broker forwarding the create answers "nats:
    no responders available for request" (seen once in 30 runs, under load).
    """

    def created() -> bool:
        try:
            client.create_stream(stream, stream, partitions=4, replication_factor=3)
        except StreamExistsError:
            return True  # an attempt that failed in transit was applied after all
        except ServerError as exc:
            if "no responders" not in (exc.details or ""):
                raise
            return False
        return True

    wait_until(created, 30, f"a metadata leader to create {stream}")


def moved_on(members: tuple[Consumer, ...], old: str) -> bool:
    """Whether every member polls the same coordinator, and it is not ``old``."""
    coordinators = {m.coordinator for m in members}
    return len(coordinators) == 1 and old not in coordinators


def test_coordinator_killed_five_times_in_a_row_loses_nothing_and_ends_no_iterator(
    cluster: LiftbridgeCluster,
) -> None:
    # Three live nodes to start with (another test may have killed one), so that each
    # kill leaves a majority.
    cluster.heal(60)
    with (
        Client(cluster.addresses, grpc_options=FAST_RECONNECT, ack_timeout=10.0) as client,
        Client(cluster.addresses, grpc_options=FAST_RECONNECT, ack_timeout=10.0) as producer,
    ):
        stream = unique("gk")
        create_once_led(client, stream)
        for p in range(4):
            cluster.wait_for_partition_leader(stream, p)
        group = unique("g")
        start = StartAt.earliest()
        with (
            client.consumer(group, streams=[stream], auto_commit=0.3, start=start) as a,
            client.consumer(group, streams=[stream], auto_commit=0.3, start=start) as b,
        ):
            wait_until(
                lambda: len(a.assignment()) + len(b.assignment()) == 4 and a.epoch == b.epoch,
                30,
                "both members reading",
            )
            readers = [Reader(a), Reader(b)]
            publisher = Publisher(producer, stream, 4)
            timings: list[float] = []
            try:
                for kill in range(KILLS):
                    began = time.monotonic()
                    coordinator = a.coordinator
                    index = cluster.index_of(coordinator)
                    cluster.kill(index)
                    wait_until(
                        functools.partial(moved_on, (a, b), coordinator),
                        30,
                        f"a new coordinator after kill {kill + 1}",
                    )
                    cluster.start_node(index, 60)
                    # Both members poll the new coordinator and read all four partitions.
                    wait_until(
                        lambda: (
                            a.epoch == b.epoch and len(a.assignment()) + len(b.assignment()) == 4
                        ),
                        30,
                        f"reading again after kill {kill + 1}",
                    )
                    timings.append(time.monotonic() - began)
                # Publishes with AckPolicy.ALL stall while a restarted replica catches up
                # (some runs got 0-5 acknowledged during the kills): go on publishing
                # until there is something to check, also after the last failover.
                wait_until(lambda: len(publisher.acks) >= 20, 60, "20 acknowledged publishes")
            finally:
                publisher.stop()
            acked = publisher.acked
            assert acked
            try:
                wait_until(
                    lambda: acked <= readers[0].values | readers[1].values,
                    60,
                    f"all {len(acked)} acknowledged messages delivered",
                )
            except pytest.fail.Exception as exc:
                missing = acked - readers[0].values - readers[1].values
                report, rewritten = undelivered_report(
                    client, stream, 4, missing, publisher.acks, readers, (a, b)
                )
                # An iterator that ended (or raised) leaves its partitions' messages
                # undelivered too: say so rather than only "timed out".
                ended = [(r.ended, r.errors) for r in readers]
                summary = f"{exc}; {len(missing)} undelivered: {report}; readers {ended}"
                if rewritten and not any(r.ended or r.errors for r in readers):
                    pytest.xfail(f"v1.9.0 rewrote acked offsets: {summary}")
                pytest.fail(summary)
            for reader in readers:
                reader.stop()
            assert [r.errors for r in readers] == [[], []]
            assert not any(r.ended for r in readers)
            stats = (a.stats(), b.stats())
            print(  # noqa: T201 - the numbers the report asks for (pytest -s)
                f"kill cycles {[round(t, 1) for t in timings]} s; acked {len(acked)}, "
                f"failed publishes {publisher.failed}; stats {stats}"
            )
            assert all(s.coordinator_changes >= KILLS for s in stats)
            # Each member found every new coordinator before it expired them (asking the
            # metadata leader, not a FetchMetadata slowed by the dead broker; asking again
            # soon while no metadata leader answers; no heartbeat call waiting longer than
            # a quarter of the consumer timeout): no rejoin was needed. (Without the first,
            # runs needed 1-3 rejoins; before the others, 2 runs in 29 needed one.) One
            # rejoin is allowed only when a kill cycle outlasted the consumer timeout
            # (3 s): the cluster itself took that long to serve both members again (a CI
            # run on a loaded machine: cycles of 2.2-2.9 s and one of 4.8 s, one rejoin).
            rejoins = [s.rejoins for s in stats]
            if max(timings) <= 3.0:
                assert rejoins == [0, 0], (rejoins, timings)
            else:
                assert sum(rejoins) <= 1, (rejoins, timings)
