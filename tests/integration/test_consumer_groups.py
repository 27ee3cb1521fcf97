"""Consumer groups against the real server (short consumer timeout: fast rebalances)."""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from liftbridge_sync import (
    ActivityEvent,
    ActivityStream,
    BrokerUnavailableError,
    Client,
    ClientClosedError,
    CommitError,
    ConsumerGroupNotFoundError,
    ConsumerIdInUseError,
    CoordinatorMismatchError,
    DeadlineExceededError,
    InternalThreadError,
    Message,
    NotGroupMemberError,
    RetryPolicy,
    ServerError,
    StartAt,
    WaitTimeoutError,
)
from liftbridge_sync._proto import api_pb2, api_pb2_grpc
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync._transport import cursors
from liftbridge_sync._transport import leader as leader_module
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync.consumer import Consumer, ConsumerStats, _readers
from liftbridge_sync.consumer import _threads as threads_module
from liftbridge_sync.consumer._mailbox import PartitionReader
from liftbridge_sync.models import PartitionMetadata
from liftbridge_sync.subscription.partition import Subscription
from liftbridge_sync.testing import LiftbridgeServer
from tests.signals import signal_another_thread
from tests.waiting import wait_until

from .conftest import unique

pytestmark = pytest.mark.integration

PARTITIONS = 4
ALL = frozenset(range(PARTITIONS))


@pytest.fixture(scope="module")
def group_server() -> Iterator[LiftbridgeServer]:
    """A server whose members must poll every 2 s (heartbeats every 0.8 s)."""
    config = {"groups.consumer.timeout": "2s", "groups.coordinator.timeout": "2s"}
    with LiftbridgeServer(config=config) as server:
        yield server


@pytest.fixture
def client(group_server: LiftbridgeServer) -> Iterator[Client]:
    with Client(group_server.address) as c:
        yield c


@pytest.fixture
def stream(client: Client) -> str:
    name = unique("grp")
    client.create_stream(name, name, partitions=PARTITIONS)
    return name


def publish_batch(client: Client, stream: str, tag: str, n: int) -> set[bytes]:
    values = {f"{tag}-{i}".encode() for i in range(n)}
    for i, value in enumerate(sorted(values)):
        client.publish(stream, value, partition=i % PARTITIONS)
    return values


def partitions_of(consumer: Consumer) -> set[int]:
    return {p for _, p in consumer.assignment()}


def split_evenly(*consumers: Consumer) -> bool:
    parts = [partitions_of(c) for c in consumers]
    return all(len(p) == PARTITIONS // len(consumers) for p in parts) and set().union(
        *parts
    ) == set(ALL)


class Collector:
    """Iterates a consumer on its own thread until stopped; records what it got."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.messages: list[Message] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self.consumer.get(0.2))
            except TimeoutError:
                continue
            except StopIteration:
                return
            except BaseException as exc:
                self.errors.append(exc)
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive()

    def values(self) -> list[bytes]:
        return [m.value for m in self.messages]


def test_two_members_split_four_partitions_and_see_each_message_once(
    client: Client, stream: str
) -> None:
    group = unique("g")
    start = StartAt.earliest()
    with (
        client.consumer(group, streams=[stream], auto_commit=None, start=start) as a,
        client.consumer(group, streams=[stream], auto_commit=None, start=start) as b,
    ):
        # A member stops reading a partition as soon as the other takes it over, and
        # learns the new epoch at its next poll.
        wait_until(lambda: split_evenly(a, b) and a.epoch == b.epoch, 15, "two partitions each")
        # Heartbeat and one reader per partition: named liftbridge-*, daemonic.
        ours = [t for t in threading.enumerate() if t.name.startswith("liftbridge-consumer")]
        assert len(ours) >= 2 + PARTITIONS and all(t.daemon for t in ours)
        assert {f"liftbridge-consumer-{stream}-{p}" for p in ALL} <= {t.name for t in ours}
        ca, cb = Collector(a), Collector(b)
        sent = publish_batch(client, stream, "m", 200)
        wait_until(lambda: len(ca.messages) + len(cb.messages) >= len(sent), 20, "all messages")
        ca.stop()
        cb.stop()
        assert not ca.errors and not cb.errors
        got = ca.values() + cb.values()
        assert sorted(got) == sorted(sent)  # every message, none twice
        assert {m.partition for m in ca.messages} == partitions_of(a)
        assert {m.partition for m in cb.messages} == partitions_of(b)
        # Per partition, offsets arrive in order.
        for collector in (ca, cb):
            for p in ALL:
                offs = [m.offset for m in collector.messages if m.partition == p]
                assert offs == sorted(offs)
        committed = a.commit()
        assert set(committed) == {(stream, p) for p in partitions_of(a)}
        for (s, p), offset in committed.items():
            assert client.fetch_cursor(f"__group:{group}", s, p) == offset


def test_partitions_of_a_closed_member_move_and_resume_from_its_cursors(
    client: Client, stream: str
) -> None:
    group = unique("g")
    start = StartAt.earliest()
    b = client.consumer(group, streams=[stream], auto_commit=0.5, start=start)
    try:
        with client.consumer(group, streams=[stream], auto_commit=30.0, start=start) as a:
            wait_until(lambda: split_evenly(a, b), 15, "two partitions each")
            a_parts = partitions_of(a)
            ca, cb = Collector(a), Collector(b)
            first = publish_batch(client, stream, "first", 100)
            wait_until(lambda: len(ca.messages) + len(cb.messages) >= len(first), 20, "batch 1")
            ca.stop()
            assert ca.messages and not ca.errors
            # Leaving the `with` block commits what `a` processed, then leaves the group.
        for p in a_parts:
            assert client.fetch_cursor(f"__group:{group}", stream, p) >= 0
        wait_until(lambda: partitions_of(b) == set(ALL), 15, "b owns every partition")
        second = publish_batch(client, stream, "second", 100)
        wait_until(lambda: len(cb.messages) >= len(first) - len(ca.messages) + len(second), 20)
        cb.stop()
        assert not cb.errors
        # b saw its own half of batch 1 and all of batch 2: a's positions were resumed
        # after its commits, with nothing lost and nothing repeated.
        assert sorted(ca.values() + cb.values()) == sorted(first | second)
        moved = [m for m in cb.messages if m.partition in a_parts]
        assert moved and all(m.value.startswith(b"second") for m in moved)
    finally:
        b.close()
    assert b.closed and not any(t.name.startswith("liftbridge-consumer") for t in _threads())


def _threads() -> list[threading.Thread]:
    # Reader threads of a closed consumer are joined by close().
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [t for t in threading.enumerate() if t.name.startswith("liftbridge-consumer")]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def test_group_errors_are_typed(client: Client, stream: str) -> None:
    core = client._core
    group = unique("g")
    with client.consumer(group, streams=[stream], auto_commit=None) as member:
        wait_until(lambda: len(member.assignment()) == PARTITIONS, 15, "assignment")
        with pytest.raises(NotGroupMemberError):
            core.call_any(
                rpcs.LEAVE_CONSUMER_GROUP,
                api_pb2.LeaveConsumerGroupRequest(groupId=group, consumerId="stranger"),
                context=CallContext.GROUP,
            )
        address = client.fetch_metadata().brokers[0].address
        with pytest.raises(CoordinatorMismatchError):
            core.invoke(
                address,
                rpcs.FETCH_CONSUMER_GROUP_ASSIGNMENTS,
                api_pb2.FetchConsumerGroupAssignmentsRequest(
                    groupId=group, consumerId=member.consumer_id, epoch=member.epoch + 100
                ),
                context=CallContext.GROUP,
            )
    with pytest.raises(ConsumerGroupNotFoundError):
        core.call_any(
            rpcs.LEAVE_CONSUMER_GROUP,
            api_pb2.LeaveConsumerGroupRequest(groupId=group, consumerId="x"),
            context=CallContext.GROUP,
        )


def test_joining_under_an_id_a_live_member_holds_is_a_consumer_id_in_use_error(
    client: Client, stream: str
) -> None:
    # Found in review: the server's refusal (FAILED_PRECONDITION "consumer is already a
    # member of the consumer group", metadata.go) was a plain ServerError naming neither
    # the group nor the id, nor what to do.
    group = unique("g")
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as m1:
        assert m1.wait_for_assignment(15) == {(stream, p) for p in ALL}
        before = set(threading.enumerate())
        with pytest.raises(ConsumerIdInUseError) as caught:
            client.consumer(group, streams=[stream], auto_commit=1.0, consumer_id="m1")
        error = caught.value
        assert isinstance(error, ServerError)  # what it was raised as before
        assert (error.group, error.consumer_id) == (group, "m1")
        assert error.code == "FAILED_PRECONDITION"
        assert error.details == "consumer is already a member of the consumer group"
        assert f"{group!r}" in str(error) and "'m1'" in str(error)
        assert "consumer_id" in str(error)  # what to change
        # The refused member started no thread, and the holder of the id is untouched:
        # still a member (refused again), holding every partition, never rejoined.
        started = {t for t in threading.enumerate() if t not in before}
        assert not [t.name for t in started if t.name.startswith("liftbridge-consumer")]
        with pytest.raises(ConsumerIdInUseError):
            client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1")
        assert m1.assignment() == {(stream, p) for p in ALL}
        assert m1.stats().rejoins == 0 and not m1.closed


def test_join_after_close_is_refused_and_joins_nothing(client: Client, stream: str) -> None:
    # Found in review: join() on a closed consumer joined the group again, and started
    # threads that ended at once (close() had stopped them): the member held partitions
    # nobody read until the server's consumer timeout, its id refused until then.
    group = unique("g")
    member = client.consumer(group, streams=[stream], auto_commit=1.0, consumer_id="m1")
    member.close()
    with pytest.raises(ClientClosedError):
        member.join()
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as again:
        assert again.wait_for_assignment(15) == {(stream, p) for p in ALL}


def _join_together(
    client: Client, group: str, stream: str, n: int
) -> tuple[list[Consumer], list[BaseException]]:
    """``n`` members joining ``group`` at the same moment: those joined, the errors."""
    barrier = threading.Barrier(n)
    joined: list[Consumer] = []
    errors: list[BaseException] = []

    def join() -> None:
        barrier.wait(10)
        try:
            joined.append(client.consumer(group, streams=[stream], auto_commit=None))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=join) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return joined, errors


def test_members_joining_a_new_group_at_the_same_time_all_join(client: Client, stream: str) -> None:
    # Found in review: the first members of a group (replicas started together) race to
    # create it; the server creates it for one and refuses the others FAILED_PRECONDITION
    # "consumer group already exists" (metadata.go), which Client.consumer() raised as a
    # ServerError: 27 of 40 such joins failed. A loser now joins the group created.
    for _ in range(3):
        joined, errors = _join_together(client, unique("g"), stream, PARTITIONS)
        try:
            assert errors == [] and len(joined) == PARTITIONS
            wait_until(functools.partial(split_evenly, *joined), 15, "a partition each")
        finally:
            for member in joined:
                member.close()


CHILD = """
import sys
from liftbridge_sync import Client, StartAt
address, group, stream = sys.argv[1:4]
with Client(address) as client:
    with client.consumer(group, streams=[stream], auto_commit=0.2, consumer_id="child",
                         start=StartAt.earliest()) as consumer:
        print("joined", flush=True)
        for msg in consumer:
            print(msg.partition, msg.value.decode(), flush=True)
"""


def test_a_killed_member_expires_and_the_other_resumes_without_loss(
    client: Client, stream: str, group_server: LiftbridgeServer
) -> None:
    group = unique("g")
    b = client.consumer(group, streams=[stream], auto_commit=0.5, start=StartAt.earliest())
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, group_server.address, group, stream],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(child.stdout.readline, "")),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    try:
        wait_until(lambda: len(partitions_of(b)) == PARTITIONS // 2, 20, "child joined")
        cb = Collector(b)
        first = publish_batch(client, stream, "first", 100)

        def child_values() -> list[str]:
            return [line.split()[1] for line in list(lines) if line[0].isdigit()]

        wait_until(lambda: len(child_values()) + len(cb.messages) >= 100, 20, "batch 1")
        child_parts = {int(line.split()[0]) for line in list(lines) if line[0].isdigit()}
        assert child_parts == set(ALL) - partitions_of(b)
        # The child's auto-commit stored positions before it dies.
        wait_until(
            lambda: all(
                client.fetch_cursor(f"__group:{group}", stream, p) >= 0 for p in child_parts
            ),
            10,
            "child commits",
        )
        child.kill()
        child.wait(10)
        second = publish_batch(client, stream, "second", 100)
        # The server expires the child after its 2 s consumer timeout; b takes over.
        wait_until(lambda: partitions_of(b) == set(ALL), 20, "b owns every partition")
        wait_until(
            lambda: (
                {v.decode() for v in cb.values()} | set(child_values())
                >= {v.decode() for v in first | second}
            ),
            20,
            "every message",
        )
        cb.stop()
        # (The server announces the expiry on the activity stream too, but v1.9.0 was seen
        # to publish that event more than 30 s late, or not within the test's time, under
        # load; so it is not asserted here. test_activity.py covers join and leave events.)
        assert not cb.errors
        seen = set(child_values()) | {v.decode() for v in cb.values()}
        assert seen == {v.decode() for v in first | second}  # nothing lost
        # Only what the child processed after its last commit can come twice.
        b_values = cb.values()
        assert len(b_values) == len(set(b_values))
        child_seen = set(child_values())
        repeated = [m for m in cb.messages if m.value.decode() in child_seen]
        assert all(m.partition in child_parts for m in repeated)
    finally:
        child.kill()
        child.wait(10)
        reader.join(10)
        if child.stdout is not None:
            child.stdout.close()
        b.close()


def take_event(events: ActivityStream, match: Callable[[ActivityEvent], bool]) -> ActivityEvent:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            event = events.get(max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        if match(event):
            return event
    pytest.fail("no matching activity event")


GO_CONSUMER = Path(__file__).parent / "go_consumer"


@pytest.fixture(scope="module")
def go_consumer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The go-liftbridge v2.4.0 consumer of ``go_consumer/``, built offline."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain")
    binary = tmp_path_factory.mktemp("go") / "go_consumer"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off"}
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GO_CONSUMER,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if built.returncode != 0:
        pytest.skip(f"go-liftbridge v2.4.0 is not available offline: {built.stderr[-500:]}")
    return binary


class GoMember:
    """A go-liftbridge consumer process; lines it printed are collected."""

    def __init__(self, binary: Path, address: str, group: str, stream: str, name: str) -> None:
        self.proc = subprocess.Popen(
            [str(binary), address, group, stream, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(line.strip() for line in iter(stdout.readline, "")),
            daemon=True,
        )
        self._reader.start()

    def values(self) -> list[str]:
        return [line.split()[1] for line in list(self.lines) if line[:1].isdigit()]

    def partitions(self) -> set[int]:
        return {int(line.split()[0]) for line in list(self.lines) if line[:1].isdigit()}

    def close(self) -> None:
        """Checkpoint and leave the group (Go's Consumer.Close)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        wait_until(lambda: "closed" in self.lines, 20, "the Go consumer to close")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture(scope="module")
def go_server() -> Iterator[LiftbridgeServer]:
    """A server with a 6 s consumer timeout: go-liftbridge sleeps 2 s after any failed
    poll (e.g. the first one after a rebalance), which a 2 s timeout would expire."""
    with LiftbridgeServer(config={"groups.consumer.timeout": "6s"}) as server:
        yield server


def test_go_and_python_members_share_a_group_and_continue_each_others_work(
    go_server: LiftbridgeServer, go_consumer: Path
) -> None:
    with Client(go_server.address) as client:
        stream = unique("grp")
        client.create_stream(stream, stream, partitions=PARTITIONS)
        go_and_python(client, stream, go_server, go_consumer)


def go_and_python(
    client: Client, stream: str, group_server: LiftbridgeServer, go_consumer: Path
) -> None:
    group = unique("g")
    py = client.consumer(group, streams=[stream], auto_commit=0.2, start=StartAt.earliest())
    go = GoMember(go_consumer, group_server.address, group, stream, "go")
    go2: GoMember | None = None
    try:
        wait_until(lambda: "joined" in go.lines, 20, "the Go consumer to join")
        wait_until(lambda: len(partitions_of(py)) == PARTITIONS // 2, 20, "a rebalance")
        cpy = Collector(py)
        first = {v.decode() for v in publish_batch(client, stream, "first", 100)}
        wait_until(lambda: len(cpy.messages) + len(go.values()) >= 100, 20, "batch 1")
        # Together, exactly once; each on its own partitions.
        assert sorted([v.decode() for v in cpy.values()] + go.values()) == sorted(first)
        assert go.partitions() == set(ALL) - partitions_of(py)
        go_parts = go.partitions()

        # The Go member checkpoints and leaves: Python resumes from Go's cursors.
        go.close()
        wait_until(lambda: partitions_of(py) == set(ALL), 20, "Python owns every partition")
        second = {v.decode() for v in publish_batch(client, stream, "second", 100)}
        wait_until(lambda: len(cpy.messages) >= 50 + 100, 20, "batch 2")
        cpy.stop()
        got = [v.decode() for v in cpy.values()]
        assert len(got) == len(set(got)) and set(got) | set(go.values()) == first | second
        assert all(m.value.startswith(b"second") for m in cpy.messages if m.partition in go_parts)

        # Python commits and leaves: a new Go member resumes from Python's cursors.
        py.close()
        go2 = GoMember(go_consumer, group_server.address, group, stream, "go2")
        wait_until(lambda: "joined" in go2.lines, 20, "the second Go consumer to join")
        third = {v.decode() for v in publish_batch(client, stream, "third", 40)}
        wait_until(lambda: len(go2.values()) >= 40, 30, "batch 3 in Go")
        assert sorted(go2.values()) == sorted(third)
    finally:
        py.close()
        go.kill()
        if go2 is not None:
            go2.kill()


def test_with_manual_commits_only_committed_positions_are_skipped_by_the_next_member(
    client: Client, stream: str
) -> None:
    group = unique("g")
    start = StartAt.earliest()

    def read(consumer: Consumer, n: int) -> list[bytes]:
        wait_until(lambda: len(consumer.assignment()) == PARTITIONS, 15, "assignment")
        return [consumer.get(10).value for _ in range(n)]

    with client.consumer(group, streams=[stream], auto_commit=None, start=start) as a:
        first = publish_batch(client, stream, "first", 40)
        assert sorted(read(a, 40)) == sorted(first)
        assert len(a.commit()) == PARTITIONS
        second = publish_batch(client, stream, "second", 40)
        assert sorted(read(a, 40)) == sorted(second)
        # No commit for the second batch; closing does not commit with auto_commit=None.
    with client.consumer(group, streams=[stream], auto_commit=None, start=start) as b:
        again = read(b, 40)
        assert sorted(again) == sorted(second)  # redelivered: at-least-once
        with pytest.raises(TimeoutError):
            b.get(0.5)  # and nothing before the committed positions


def test_get_many_hands_out_batches_that_count_as_processed_at_the_next_read(
    client: Client, stream: str
) -> None:
    group = unique("g")
    start = StartAt.earliest()
    with client.consumer(group, streams=[stream], auto_commit=None, start=start) as a:
        wait_until(lambda: len(a.assignment()) == PARTITIONS, 15, "assignment")
        for bad in (0, -1, True, 1.5):
            with pytest.raises((TypeError, ValueError)):
                a.get_many(bad)  # type: ignore[arg-type]
        sent = publish_batch(client, stream, "many", 60)
        got: list[Message] = []
        while len(got) < len(sent):
            batch = a.get_many(25, 10)
            assert 1 <= len(batch) <= 25
            got.extend(batch)
        assert sorted(m.value for m in got) == sorted(sent)
        with pytest.raises(WaitTimeoutError):  # typed, and a TimeoutError
            a.get_many(10, 0.3)  # nothing left; the last batch is now processed
        newest: dict[int, int] = {}
        for m in got:
            newest[m.partition] = max(m.offset, newest.get(m.partition, -1))
        assert a.commit() == {(stream, p): offset for p, offset in newest.items()}
        assert a.stats().delivered == len(sent)
    with client.consumer(group, streams=[stream], auto_commit=None, start=start) as b:
        wait_until(lambda: len(b.assignment()) == PARTITIONS, 15, "assignment")
        with pytest.raises(TimeoutError):
            b.get_many(10, 0.5)  # every batch was committed


def test_a_read_only_partition_is_read_to_its_end_once_and_its_positions_count(
    client: Client,
) -> None:
    # The server ends a reader at the end of a read-only partition ("Stop offset
    # reached" / "End of readonly partition"): no other member took it.
    stream = unique("ro")
    client.create_stream(stream, stream, partitions=1)
    sent = [f"ro-{i}".encode() for i in range(30)]
    for value in sent:
        client.publish(stream, value, partition=0)
    client.set_stream_readonly(stream)
    with client.consumer(
        unique("g"), streams=[stream], auto_commit=None, start=StartAt.earliest()
    ) as consumer:
        assert consumer.wait_for_assignment(15) == {(stream, 0)}
        reader = [t for t in threading.enumerate() if t.name == f"liftbridge-consumer-{stream}-0"]
        for thread in reader:
            thread.join(15)  # it has queued the whole partition and reached its end
            assert not thread.is_alive()
        got = [consumer.get(10) for _ in sent]
        assert [m.value for m in got] == sent
        assert [m.offset for m in got] == list(range(len(sent)))
        with pytest.raises(TimeoutError):
            consumer.get(2.0)  # two polls: the partition is not read again
        assert consumer.commit() == {(stream, 0): len(sent) - 1}
        assert consumer.stats().expected_races == 0
    # Closed, its readers are gone: a commit() now would store nothing, and said {}.
    with pytest.raises(ClientClosedError, match="commit"):
        consumer.commit()


def test_a_failed_reader_restarts_where_it_stopped_on_a_partition_still_assigned(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader fails (its subscription gave up: a failover outlasting resubscribe_wait,
    # here injected) and starts again at the next poll. The partition never left the
    # member and nothing is committed yet: what the reader had queued must still go out,
    # and the new reader must not start from the start position (new-only) again.
    stream = unique("fail")
    client.create_stream(stream, stream, partitions=1)
    sent_a = [f"a-{i}".encode() for i in range(10)]

    class GivesUpOnce(Subscription):
        """The first one gives up once it has handed out the last message of batch A."""

        gave_up = False

        def __next__(self) -> Message:
            if getattr(self, "_armed", False):
                GivesUpOnce.gave_up = True
                raise BrokerUnavailableError("injected: no leader within resubscribe_wait")
            msg = super().__next__()
            self._armed = msg.value == sent_a[-1] and not GivesUpOnce.gave_up
            return msg

    monkeypatch.setattr(_readers, "Subscription", GivesUpOnce)
    with client.consumer(unique("g"), streams=[stream], auto_commit=30.0) as consumer:
        assert consumer.wait_for_assignment(15) == {(stream, 0)}

        def reading() -> bool:  # new-only: the reader is subscribed once a message comes
            client.publish(stream, b"warm-up", partition=0)
            try:
                return consumer.get(0.5).value == b"warm-up"
            except TimeoutError:
                return False

        wait_until(reading, 15, "the reader subscribed")
        for value in sent_a:
            client.publish(stream, value, partition=0)
        wait_until(lambda: not consumer.assignment(), 15, "the reader gave up")
        sent_b = [f"b-{i}".encode() for i in range(5)]
        for value in sent_b:
            client.publish(stream, value, partition=0)
        # Nothing of A is read before the restart (reading it would commit it on the way).
        wait_until(lambda: bool(consumer.assignment()), 15, "the reader restarted")
        got = [consumer.get(10).value for _ in sent_a + sent_b]
        assert got == sent_a + sent_b
        with pytest.raises(TimeoutError):
            consumer.get(0.5)  # nothing twice


def test_wait_for_assignment_returns_the_first_answer_even_an_empty_one(client: Client) -> None:
    stream = unique("one")
    client.create_stream(stream, stream, partitions=1)
    group = unique("g")
    # The server gives a partition to the member with the fewest, the lowest id first.
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="a") as a:
        assert a.wait_for_assignment(15) == {(stream, 0)}
        assert a.assignment() == {(stream, 0)}
        # More members than partitions: the second member's first answer is empty.
        with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="b") as b:
            assert b.wait_for_assignment(15) == frozenset()
    a.close()
    with pytest.raises(ClientClosedError):
        a.wait_for_assignment(1)


def test_wait_for_assignment_wakes_on_close(client: Client, stream: str) -> None:
    consumer = client.consumer(unique("g"), streams=[stream], auto_commit=None)
    consumer.wait_for_assignment(15)
    errors: list[BaseException] = []
    # A second consumer whose first poll has not been answered: close() must wake it.
    late = Consumer(client._core, unique("g"), [stream], auto_commit=None)
    waiter = threading.Thread(
        target=lambda: errors.extend(_raised(lambda: late.wait_for_assignment(30))),
        daemon=True,
    )
    waiter.start()
    late.close()
    waiter.join(10)
    assert not waiter.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ClientClosedError)
    consumer.close()


def _raised(call: Callable[[], object]) -> list[BaseException]:
    try:
        call()
    except BaseException as exc:
        return [exc]
    return []


def test_stats_count_delivered_messages_in_a_frozen_snapshot(client: Client, stream: str) -> None:
    with client.consumer(
        unique("g"), streams=[stream], auto_commit=None, start=StartAt.earliest()
    ) as consumer:
        assert consumer.wait_for_assignment(15) == {(stream, p) for p in ALL}
        before = consumer.stats()
        assert before == ConsumerStats()
        sent = publish_batch(client, stream, "s", 20)
        got = {consumer.get(10).value for _ in sent}
        assert got == sent
        after = consumer.stats()
        assert after.delivered == 20 and after.rejoins == 0
        assert before.delivered == 0  # a snapshot, not a live view
        with pytest.raises(dataclasses.FrozenInstanceError):
            after.delivered = 0  # type: ignore[misc]


def test_a_partition_held_at_a_newer_epoch_is_an_expected_race_logged_at_debug(
    client: Client,
    stream: str,
    group_server: LiftbridgeServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="liftbridge_sync")
    group = unique("g")
    with client.consumer(
        group, streams=[stream], auto_commit=0.2, start=StartAt.earliest()
    ) as consumer:
        consumer.wait_for_assignment(15)
        # What another member does after a rebalance the member has not polled yet:
        # subscribe to partition 0 with a newer group epoch. The server ends the
        # member's stream and refuses its reader's resubscriptions.
        request = api_pb2.SubscribeRequest(
            stream=stream,
            partition=0,
            startPosition=api_pb2.StartPosition.NEW_ONLY,
            consumer=api_pb2.Consumer(
                groupId=group, groupEpoch=consumer.epoch + 1000, consumerId="intruder"
            ),
        )
        with grpc.insecure_channel(group_server.address) as channel:
            stub = api_pb2_grpc.APIStub(channel)  # type: ignore[no-untyped-call]
            intruder = stub.Subscribe(request)
            next(intruder)  # the handshake: the partition is the intruder's now
            wait_until(
                lambda: (
                    consumer.stats().expected_races >= 2 and consumer.stats().reader_restarts >= 1
                ),
                15,
                "the reader refused at its restart",
            )
            assert (stream, 0) not in consumer.assignment()
            intruder.cancel()
        # With the intruder gone, the next restart reads partition 0 again; nothing lost.
        wait_until(lambda: (stream, 0) in consumer.assignment(), 15, "partition 0 back")
        sent = publish_batch(client, stream, "r", 8)
        got = {consumer.get(10).value for _ in sent}
        assert got == sent
    raced = [r for r in caplog.records if "newer epoch" in r.getMessage()]
    assert raced and all(r.levelno == logging.DEBUG for r in raced)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, [r.getMessage() for r in loud]


def test_a_member_unheard_for_most_of_the_consumer_timeout_withholds_its_commits(
    client: Client,
    stream: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = unique("g")
    with client.consumer(
        group, streams=[stream], auto_commit=0.1, start=StartAt.earliest(), rejoin=False
    ) as member:
        member.wait_for_assignment(15)
        first = publish_batch(client, stream, "first", 8)
        assert {member.get(10).value for _ in first} == first
        with pytest.raises(TimeoutError):
            member.get(0.01)  # the first batch counts as processed
        last = {p: 1 for p in ALL}  # two messages a partition: offsets 0 and 1
        wait_until(
            lambda: member.committed() == {(stream, p): last[p] for p in ALL}, 10, "first batch"
        )
        # A fault: the heartbeat's poll hangs, as in a process paused past the server's
        # consumer timeout. The server drops the member; its streams stay open.
        resume = threading.Event()
        poll = member._membership.poll

        def hung() -> api_pb2.FetchConsumerGroupAssignmentsResponse:
            resume.wait(30)
            return poll()

        monkeypatch.setattr(member._membership, "poll", hung)
        try:
            wait_until(lambda: not member._membership.may_commit(), 10, "the member unheard")
            second = publish_batch(client, stream, "second", 8)
            assert {member.get(10).value for _ in second} == second
            with pytest.raises(TimeoutError):
                member.get(0.01)  # the second batch counts as processed, too
            withheld = member.stats().commits_withheld
            wait_until(lambda: member.stats().commits_withheld >= withheld + 3, 10, "auto-commits")
            # The cursors another member would start from are still the first batch's.
            stored = {p: client.fetch_cursor(member.cursor_id, stream, p) for p in ALL}
            assert stored == last
            assert member.committed() == {(stream, p): last[p] for p in ALL}
        finally:
            resume.set()
    warned = [r.getMessage() for r in caplog.records if "withheld" in r.getMessage()]
    assert len(warned) == 1 and "has not answered for" in warned[0], warned


@pytest.mark.parametrize("rejoin", [True, False])
def test_a_member_dropped_by_the_server_rejoins_unless_asked_not_to(
    client: Client, stream: str, rejoin: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Each reader's start and end, for the report of a failure.
    caplog.set_level(logging.DEBUG, logger="liftbridge_sync.consumer")
    group = unique("g")
    start = StartAt.earliest()
    with (
        client.consumer(group, streams=[stream], auto_commit=0.3, start=start, rejoin=rejoin) as a,
        client.consumer(group, streams=[stream], auto_commit=0.3, start=start) as b,
    ):
        wait_until(lambda: split_evenly(a, b) and a.epoch == b.epoch, 15, "two each")
        ca, cb = Collector(a), Collector(b)
        first = publish_batch(client, stream, "first", 40)
        wait_until(lambda: set(ca.values()) | set(cb.values()) >= first, 20, "batch 1")
        old_id = a.consumer_id
        # Stall a's heartbeat (it needs the consumer's lock to poll) until the server
        # has expired it and given every partition to b.
        with a._lock:
            wait_until(lambda: partitions_of(b) == set(ALL), 20, "a expired")
        second = publish_batch(client, stream, "second", 40)
        if not rejoin:
            wait_until(lambda: bool(ca.errors), 20, "a's iterator raising")
            assert isinstance(ca.errors[0], NotGroupMemberError | ConsumerGroupNotFoundError)
            assert a.stats().rejoins == 0
            # Found in review: once a first answer had been applied, wait_for_assignment()
            # returned an empty assignment, as if the member were idle, not the failure.
            with pytest.raises((NotGroupMemberError, ConsumerGroupNotFoundError)):
                a.wait_for_assignment(0)
            # And commit() returned {}, as if nothing were left to commit.
            with pytest.raises((NotGroupMemberError, ConsumerGroupNotFoundError)):
                a.commit()

            # b takes every partition over from the committed cursors: it reads all of
            # the second batch, and what a delivered of the first but had not committed
            # when it stalled (its auto-commit may or may not have run): nothing is lost.
            def b_missing() -> str:
                missing = sorted((first | second) - set(ca.values()) - set(cb.values()))
                return (
                    f"b reads all: missing {missing}, second not by b "
                    f"{sorted(second - set(cb.values()))}; b reads {sorted(b.assignment())} "
                    f"at epoch {b.epoch}, {b.stats()}, committed {b._commits.committed()}"
                )

            wait_until(
                lambda: (
                    set(cb.values()) >= second
                    and set(ca.values()) | set(cb.values()) >= first | second
                ),
                20,
                b_missing,
            )
            cb.stop()
            return
        wait_until(
            lambda: a.stats().rejoins == 1 and split_evenly(a, b) and a.epoch == b.epoch,
            30,
            "a rejoined",
        )
        assert a.consumer_id != old_id  # a generated id is replaced
        third = publish_batch(client, stream, "third", 40)
        everything = first | second | third
        wait_until(lambda: set(ca.values()) | set(cb.values()) >= everything, 20, "every message")
        ca.stop()
        cb.stop()
        assert not ca.errors and not cb.errors
        assert set(ca.values()) & third  # a delivers again after rejoining
        warned = [r.getMessage() for r in caplog.records if "rejoining as" in r.getMessage()]
        assert len(warned) == 1 and old_id in warned[0]


def test_the_metadata_leader_names_the_coordinator_without_a_report(
    client: Client, stream: str
) -> None:
    group = unique("g")
    with client.consumer(group, streams=[stream], auto_commit=None) as member:
        member.wait_for_assignment(15)
        membership = member._membership
        lookup, consumer_id = membership._lookup, member.consumer_id

        def ask() -> tuple[str, int] | None:
            return lookup.ask(consumer_id, 5.0, Budget.once(5.0), "test")

        # The server's refusal of an impossible report carries the current coordinator
        # and epoch: what a member asks instead of a slow FetchMetadata.
        assert ask() == (member.coordinator, member.epoch)
        # Nothing was reported: the member keeps polling the same coordinator.
        epoch, coordinator = member.epoch, member.coordinator
        assert membership.refresh_group() is False
        assert (member.epoch, member.coordinator) == (epoch, coordinator)
        assert member.stats().coordinator_changes == 0
    with pytest.raises(ConsumerGroupNotFoundError):
        ask()


def test_a_cursor_past_the_end_of_a_stream_created_again_starts_from_the_start_position(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    # v1.9.0 keeps a group's cursors when their stream is deleted: the stream created
    # again under the same name starts at offset 0, below the old cursor. Starting
    # after that cursor would skip every message up to it without a word.
    group = unique("g")
    name = unique("grp")
    start = StartAt.earliest()
    client.create_stream(name, name)
    for i in range(20):
        client.publish(name, b"old-%d" % i)
    with client.consumer(group, streams=[name], auto_commit=None, start=start) as a:
        assert [a.get(10).value for _ in range(20)] == [b"old-%d" % i for i in range(20)]
        assert a.commit() == {(name, 0): 19}
    client.delete_stream(name)
    client.create_stream(name, name)
    new = [b"new-%d" % i for i in range(5)]
    for value in new:
        client.publish(name, value)
    with caplog.at_level(logging.WARNING, logger="liftbridge_sync.consumer"):
        with client.consumer(group, streams=[name], auto_commit=None, start=start) as b:
            assert [b.get(10).value for _ in range(5)] == new
    assert f"{name}/0" in caplog.text and "cursor 19" in caplog.text


def test_a_revoked_reader_stuck_in_a_call_does_not_stall_the_heartbeat(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: the reader of partition 0 hangs in a call it cannot leave (its cursor
    # fetch, with the cursors partition's leader hung), up to rpc_timeout per attempt.
    # Partition 0 then moves to another member. The heartbeat must not wait for the
    # stuck thread: the server drops a member that has not polled for the consumer
    # timeout (2 s here), far less than the call may take.
    hung = threading.Event()
    release = threading.Event()
    start_position = _readers.Readers._start_position

    def stuck(self: _readers.Readers, reader: PartitionReader) -> StartAt:
        if reader.partition == 0:
            hung.set()
            release.wait(60)
        return start_position(self, reader)

    monkeypatch.setattr(_readers.Readers, "_start_position", stuck)
    group = unique("g")
    # Ties go to the lower id: "m1" is given partitions 0 and 2 when it joins.
    a = client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m2")
    try:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        assert hung.wait(15)
        with a._lock:
            stuck_reader = a._readers._readers[(stream, 0)].thread
        assert stuck_reader is not None
        with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as b:
            wait_until(lambda: split_evenly(a, b) and a.epoch == b.epoch, 15, "two each")
            assert partitions_of(b) == {0, 2}
            # The heartbeat goes on polling (every 0.8 s) while the revoked reader is
            # still stuck.
            revoked_at = a._membership.heard_at
            wait_until(lambda: a._membership.heard_at > revoked_at, 5, "a polling again")
            assert stuck_reader.is_alive()
            assert a.stats().rejoins == 0
            release.set()
            stuck_reader.join(15)
            assert not stuck_reader.is_alive()  # it ends by itself once its call returns
            assert a.stats().rejoins == 0 and a.epoch == b.epoch
    finally:
        release.set()
        a.close()
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())


def test_a_reader_thread_that_cannot_start_ends_the_membership_with_a_typed_error(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: the process is out of threads when the first assignment arrives.
    class NoThreads(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(
        _readers,
        "threading",
        types.SimpleNamespace(Thread=NoThreads, current_thread=threading.current_thread),
    )
    consumer = client.consumer(unique("g"), streams=[stream], auto_commit=1.0)
    try:
        with pytest.raises(InternalThreadError) as raised:
            consumer.wait_for_assignment(15)
        assert isinstance(raised.value.__cause__, RuntimeError)
        with pytest.raises(InternalThreadError):
            consumer.get(5)
    finally:
        consumer.close()  # nothing to join of a thread that never started
    assert consumer.closed
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())


def test_a_commit_stuck_on_a_hung_leader_does_not_stall_the_heartbeat_on_a_revoke(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: storing the cursor of partition 1 hangs (its cursor partition's leader
    # hung), inside a commit() the user made, which holds the commit lock meanwhile.
    # Partitions 0 and 2 then move to another member. The commit on revoke must not be
    # made on the heartbeat thread, nor wait for that lock: the server drops a member
    # that has not polled for the consumer timeout (2 s here).
    hung = threading.Event()
    release = threading.Event()
    set_cursor = cursors.set_cursor

    def hanging(
        core: ClientCore, cursor_id: str, s: str, partition: int, offset: int, **kw: bool
    ) -> None:
        if s == stream and partition == 1:
            hung.set()
            release.wait(60)
        set_cursor(core, cursor_id, s, partition, offset, **kw)

    monkeypatch.setattr(cursors, "set_cursor", hanging)
    # The new owner's readers wait until a has seen the revoke: one subscribing first
    # would end a's streams, and a would drop the positions (a lost race, not a revoke).
    revoked = threading.Event()
    start_position = _readers.Readers._start_position

    def after_the_revoke(self: _readers.Readers, reader: PartitionReader) -> StartAt:
        if self._consumer_id == "m1":
            revoked.wait(30)
        return start_position(self, reader)

    monkeypatch.setattr(_readers.Readers, "_start_position", after_the_revoke)
    group = unique("g")
    start = StartAt.earliest()
    # Ties go to the lower id: "m1" is given partitions 0 and 2 when it joins.
    a = client.consumer(group, streams=[stream], auto_commit=60.0, start=start, consumer_id="m2")
    committer: threading.Thread | None = None
    try:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        sent = publish_batch(client, stream, "m", 8)  # offsets 0 and 1 per partition
        assert {a.get(10).value for _ in sent} == sent
        committed: list[dict[tuple[str, int], int]] = []
        committer = threading.Thread(target=lambda: committed.append(a.commit()), daemon=True)
        committer.start()  # stores partition 0, then hangs on partition 1
        assert hung.wait(15)
        with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as b:
            wait_until(lambda: partitions_of(a) == {1, 3}, 15, "a revoked 0 and 2")
            revoked_at = time.monotonic()
            revoked.set()
            # The revoked partition 2's position is committed at once, the lock held
            # by the stuck commit() notwithstanding.
            wait_until(lambda: client.fetch_cursor(a.cursor_id, stream, 2) == 1, 5, "cursor 2")
            # The heartbeat goes on polling for longer than the consumer timeout.
            wait_until(lambda: a._membership.heard_at > revoked_at + 2.5, 10, "a polling on and on")
            assert a.stats().rejoins == 0 and a.epoch == b.epoch
            assert partitions_of(b) == {0, 2}
            release.set()
            committer.join(15)
            assert not committer.is_alive()
            # The stuck commit stored partition 1 and skipped 2, taken away meanwhile.
            assert committed == [{(stream, p): 1 for p in (0, 1, 3)}]
    finally:
        release.set()
        revoked.set()
        if committer is not None:
            committer.join(15)
        a.close()
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())


def test_close_polls_on_while_it_waits_for_a_stuck_commit_and_makes_the_final_one(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault seen in a rolling restart: an auto-commit's SetCursor to a cursor leader
    # just restarted hangs until its deadline. close() waits for it; the heartbeat had
    # stopped already, so the coordinator counted as silent (1.5 s here), the final
    # commit was withheld and the partition's next owner read everything again.
    hung = threading.Event()
    set_cursor = cursors.set_cursor
    calls: list[int] = []

    def hanging(
        core: ClientCore, cursor_id: str, s: str, partition: int, offset: int, **kw: bool
    ) -> None:
        calls.append(offset)
        if len(calls) == 1:
            hung.set()
            time.sleep(3.0)  # the fault itself: a call that does not answer for 3 s
            raise DeadlineExceededError("deadline exceeded", code="DEADLINE_EXCEEDED")
        set_cursor(core, cursor_id, s, partition, offset, **kw)

    sent = [b"c-%d" % i for i in range(4)]
    for value in sent:
        client.publish(stream, value, partition=0)
    monkeypatch.setattr(cursors, "set_cursor", hanging)
    start = StartAt.earliest()
    with client.consumer(unique("g"), streams=[stream], auto_commit=0.1, start=start) as a:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        assert a.get(10).value == sent[0]
        assert a.get(10).value == sent[1]  # offset 0 processed: the auto-commit hangs
        assert hung.wait(10)
        assert [a.get(10).value for _ in sent[2:]] == sent[2:]
    # The with block counted offset 3 processed, and close() committed it.
    assert client.fetch_cursor(a.cursor_id, stream, 0) == 3
    assert a.stats().commits_withheld == 0


def _unreachable_cursor_leader_for(
    client: Client, stream: str, partition: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault: the ``__cursors`` leader of ``partition``'s cursor cannot be reached."""
    set_cursor = cursors.set_cursor

    def unreachable(
        core: ClientCore, cursor_id: str, s: str, p: int, offset: int, **kw: bool
    ) -> None:
        if s == stream and p == partition:
            raise BrokerUnavailableError("connection refused", code="UNAVAILABLE")
        set_cursor(core, cursor_id, s, p, offset, **kw)

    monkeypatch.setattr(cursors, "set_cursor", unreachable)


def test_a_cursor_that_cannot_be_stored_does_not_hold_back_the_others_in_a_commit(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit stopped at the first cursor that failed: partitions 1 to 3, sorted
    # after partition 0, were committed by no commit while its cursor leader was gone.
    _unreachable_cursor_leader_for(client, stream, 0, monkeypatch)
    sent = publish_batch(client, stream, "f", 8)  # offsets 0 and 1 per partition
    start = StartAt.earliest()
    with client.consumer(unique("g"), streams=[stream], auto_commit=None, start=start) as a:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        assert {a.get(10).value for _ in sent} == sent
        with pytest.raises(CommitError) as caught:
            a.commit()
        assert a.committed() == {(stream, p): 1 for p in (1, 2, 3)}
    error = caught.value
    assert list(error.failed) == [(stream, 0)]
    assert isinstance(error.failed[(stream, 0)], BrokerUnavailableError)
    assert f"{stream}/0: connection refused" in str(error)
    assert error.committed == {(stream, p): 1 for p in (1, 2, 3)}
    assert [client.fetch_cursor(a.cursor_id, stream, p) for p in sorted(ALL)] == [-1, 1, 1, 1]


def test_an_auto_commit_stores_the_other_cursors_while_one_cannot_be_stored(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _unreachable_cursor_leader_for(client, stream, 0, monkeypatch)
    sent = publish_batch(client, stream, "f", 8)
    start = StartAt.earliest()
    caplog.set_level(logging.WARNING, "liftbridge_sync.consumer")
    with client.consumer(unique("g"), streams=[stream], auto_commit=0.1, start=start) as a:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        assert {a.get(10).value for _ in sent} == sent
        # Every partition has a processed position by now (its offset 0 at least).
        wait_until(
            lambda: all((stream, p) in a.committed() for p in (1, 2, 3)), 10, "cursors 1 to 3"
        )
    assert f"auto-commit failed: the cursors of 1 partition(s) were not stored ({stream}/0" in (
        caplog.text
    )
    assert [client.fetch_cursor(a.cursor_id, stream, p) for p in sorted(ALL)] == [-1, 1, 1, 1]


def test_a_second_close_from_another_thread_returns_once_the_member_has_left(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second close() returned at once while the first was still leaving the group:
    # code that closed and then counted the group's members found this one still in.
    group = unique("g")
    a = client.consumer(group, streams=[stream], auto_commit=None, consumer_id="a")
    assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
    # The first close() is held up while the heartbeat still polls (a leave long after
    # the coordinator's last answer is left to the server's consumer timeout).
    closing, go, left = threading.Event(), threading.Event(), threading.Event()
    join_stopped, leave = a._readers.join_stopped, a._membership.leave

    def held_up(deadline: float) -> list[str]:
        closing.set()
        go.wait(30)
        return join_stopped(deadline)

    def leave_and_say() -> None:
        leave()
        left.set()

    monkeypatch.setattr(a._readers, "join_stopped", held_up)
    monkeypatch.setattr(a._membership, "leave", leave_and_say)
    first = threading.Thread(target=a.close, daemon=True)
    first.start()
    seen: list[bool] = []

    def close_again() -> None:
        a.close()
        seen.append(left.is_set())

    second = threading.Thread(target=close_again, daemon=True)
    try:
        assert closing.wait(15)
        second.start()
        second.join(0.5)  # a close() that does not wait for the first returns meanwhile
        assert seen == []
    finally:
        go.set()
        first.join(30)
        second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert seen == [True]
    # The group is empty: a new member is given every partition at once.
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="b") as b:
        assert b.wait_for_assignment(15) == {(stream, p) for p in ALL}


def test_close_from_another_thread_ends_a_blocked_iteration_before_it_joins_the_readers(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The iteration ended only once close() had joined the readers (up to
    # 2 x rpc_timeout + 1 s) and made the final commit: a loop told to stop went on
    # waiting that long.
    group = unique("g")
    a = client.consumer(group, streams=[stream], auto_commit=5.0, consumer_id="a")
    assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
    ended, closing = threading.Event(), threading.Event()
    join_stopped = a._readers.join_stopped
    iteration_ended_first: list[bool] = []

    def held_up(deadline: float) -> list[str]:
        closing.set()
        iteration_ended_first.append(ended.wait(10))  # until the iteration ended
        return join_stopped(deadline)

    monkeypatch.setattr(a._readers, "join_stopped", held_up)

    def iterate() -> None:
        assert list(a) == []  # an idle stream: blocked until close()
        ended.set()

    iterating = threading.Thread(target=iterate, daemon=True)
    iterating.start()
    closer = threading.Thread(target=a.close, daemon=True)
    try:
        closer.start()
        assert closing.wait(15)
        closer.join(30)
        assert not closer.is_alive()
    finally:
        ended.set()
        iterating.join(30)
    assert iteration_ended_first and all(iteration_ended_first)
    assert not iterating.is_alive()


def test_a_rejoin_that_completes_after_close_has_left_leaves_the_group_again(
    client: Client, stream: str, group_server: LiftbridgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # close() waits for the heartbeat thread at most 2 x rpc_timeout + 1 s, then leaves
    # the group. A rejoin still in flight then must not leave a member behind: it would
    # hold partitions nobody reads until the server's consumer timeout.
    group = unique("g")
    with Client(group_server.address, rpc_timeout=0.3) as quick:
        a = quick.consumer(group, streams=[stream], auto_commit=None)
        a.wait_for_assignment(15)
        membership = a._membership
        rejoining, left = threading.Event(), threading.Event()
        join, leave = membership.join, membership.leave

        def join_after_close_left(abort: object = None) -> None:
            # The join reaches the server late: sent already, close()'s abort of the
            # rejoin does not take it back.
            rejoining.set()
            left.wait(30)
            join()

        def leave_and_say() -> None:
            leave()
            left.set()

        monkeypatch.setattr(membership, "join", join_after_close_left)
        monkeypatch.setattr(membership, "leave", leave_and_say)
        old_id = a.consumer_id
        # The server drops the member (as if it had expired): it rejoins under a new id.
        client._core.call_any(
            rpcs.LEAVE_CONSUMER_GROUP,
            api_pb2.LeaveConsumerGroupRequest(groupId=group, consumerId=old_id),
            context=CallContext.GROUP,
        )
        assert rejoining.wait(15)
        a.close()
        assert left.is_set()
        (heartbeat,) = [t for t in a._threads.started if t.name == f"liftbridge-consumer-{group}"]
        heartbeat.join(15)
        assert not heartbeat.is_alive()
    new_id = a.consumer_id
    assert new_id != old_id
    # The rejoined member is no longer in the group: the server accepts a join under
    # its id (it refuses one for a member it has).
    client._core.call_any(
        rpcs.JOIN_CONSUMER_GROUP,
        api_pb2.JoinConsumerGroupRequest(groupId=group, consumerId=new_id, streams=[stream]),
        context=CallContext.GROUP,
    )
    client._core.call_any(
        rpcs.LEAVE_CONSUMER_GROUP,
        api_pb2.LeaveConsumerGroupRequest(groupId=group, consumerId=new_id),
        context=CallContext.GROUP,
    )


def test_close_cuts_short_a_rejoin_backing_off_between_its_join_attempts(
    client: Client,
    stream: str,
    group_server: LiftbridgeServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A fault: every join of the rejoin is refused UNAVAILABLE (retried under the retry
    # policy, a long back-off between attempts). close() waited for the heartbeat thread
    # its whole bound (2 x rpc_timeout + 1 s), then left it behind, still retrying.
    caplog.set_level(logging.WARNING, logger="liftbridge_sync.consumer")
    group = unique("g")
    slow = RetryPolicy(max_attempts=100, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0)
    with Client(group_server.address, rpc_timeout=0.3, retry=slow) as quick:
        a = quick.consumer(group, streams=[stream], auto_commit=None)
        a.wait_for_assignment(15)
        old_id = a.consumer_id
        invoke = quick._core.invoke
        refused = threading.Event()

        def refusing(address: str, rpc: Any, request: Any, **kwargs: Any) -> Any:
            if rpc is rpcs.JOIN_CONSUMER_GROUP:
                refused.set()
                raise BrokerUnavailableError(
                    "consumer group: broker unavailable: scripted",
                    code="UNAVAILABLE",
                    details="scripted",
                )
            return invoke(address, rpc, request, **kwargs)

        monkeypatch.setattr(quick._core, "invoke", refusing)
        # The server drops the member (as if it had expired): it rejoins under a new id.
        client._core.call_any(
            rpcs.LEAVE_CONSUMER_GROUP,
            api_pb2.LeaveConsumerGroupRequest(groupId=group, consumerId=old_id),
            context=CallContext.GROUP,
        )
        assert refused.wait(15)  # the rejoin's first attempt: its back-off follows
        (heartbeat,) = [t for t in a._threads.started if t.name == f"liftbridge-consumer-{group}"]
        closing = time.monotonic()
        a.close()
        took = time.monotonic() - closing
        assert not heartbeat.is_alive()
    assert took < 1.0, took
    assert "closing without waiting longer" not in caplog.text


def test_a_member_whose_threads_cannot_start_leaves_the_group_with_a_typed_error(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: the process runs out of threads between the heartbeat's start and the
    # commit thread's. Nobody holds the consumer to close it: the heartbeat must not be
    # left polling, keeping the member (and its partitions) in the group.
    class NoCommitThread(threading.Thread):
        def start(self) -> None:
            if "-commit-" in self.name:
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(
        threads_module,
        "threading",
        types.SimpleNamespace(
            Thread=NoCommitThread,
            Lock=threading.Lock,
            Event=threading.Event,
            current_thread=threading.current_thread,
        ),
    )
    group = unique("g")
    with pytest.raises(InternalThreadError) as raised:
        client.consumer(group, streams=[stream], auto_commit=1.0, consumer_id="m1")
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())
    # It left the group: the server accepts a join under its id again.
    monkeypatch.undo()
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as again:
        assert again.wait_for_assignment(15) == {(stream, p) for p in ALL}


def test_a_member_interrupted_while_its_threads_start_leaves_the_group(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: Ctrl-C (its handler's KeyboardInterrupt) between the heartbeat's start and
    # the commit thread's. Only a thread that could not start used to make the member
    # leave: this one stayed in the group, heartbeating and holding partitions, with
    # nothing left to close it.
    class InterruptedCommitThread(threading.Thread):
        def start(self) -> None:
            if "-commit-" in self.name:
                raise KeyboardInterrupt
            super().start()

    monkeypatch.setattr(
        threads_module,
        "threading",
        types.SimpleNamespace(
            Thread=InterruptedCommitThread,
            Lock=threading.Lock,
            Event=threading.Event,
            current_thread=threading.current_thread,
        ),
    )
    group = unique("g")
    with pytest.raises(KeyboardInterrupt):
        client.consumer(group, streams=[stream], auto_commit=1.0, consumer_id="m1")
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())
    monkeypatch.undo()
    # It left the group: another member is given every partition (not half of them).
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m2") as other:
        assert other.wait_for_assignment(15) == {(stream, p) for p in ALL}


def test_a_member_interrupted_as_its_join_is_answered_leaves_the_group(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch, raising_handler: threading.Event
) -> None:
    # A fault: Ctrl-C (here SIGUSR1's handler, given to another thread) while the answer
    # to a join the server applied is on its way. The member stayed in the group, holding
    # partitions nobody read, until the server's consumer timeout; joining again under
    # its id was refused ("already a member").
    answered = threading.Event()
    released = threading.Event()
    call_any = client._core.call_any

    def held(rpc: Any, request: Any, **kwargs: Any) -> Any:
        response = call_any(rpc, request, **kwargs)
        if rpc is rpcs.JOIN_CONSUMER_GROUP:
            answered.set()
            wait_event(released, 30.0)  # in slices: the signal's handler runs within one
        return response

    monkeypatch.setattr(client._core, "call_any", held)
    group = unique("g")
    signal_another_thread(
        lambda: client.consumer(group, streams=[stream], auto_commit=1.0, consumer_id="m1"),
        unblock=released.set,
        what="the join",
        ready=answered.is_set,
    )
    raising_handler.set()
    monkeypatch.undo()
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())
    # It left the group: it may join again under its id, and is given every partition.
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as again:
        assert again.wait_for_assignment(15) == {(stream, p) for p in ALL}


def test_close_waits_for_readers_stuck_in_a_call_within_one_deadline_for_all(
    stream: str,
    group_server: LiftbridgeServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A fault: every reader hangs in its cursor fetch (the cursors' leader hung). close()
    # used to wait 2 x rpc_timeout + 1 s for each stuck thread in turn: with many
    # partitions, minutes. One deadline bounds them all.
    stuck = threading.Semaphore(0)
    release = threading.Event()
    start_position = _readers.Readers._start_position

    def hanging(self: _readers.Readers, reader: PartitionReader) -> StartAt:
        stuck.release()
        release.wait(60)
        return start_position(self, reader)

    monkeypatch.setattr(_readers.Readers, "_start_position", hanging)
    try:
        with Client(group_server.address, rpc_timeout=0.5) as quick:  # 2 s to join
            consumer = quick.consumer(unique("g"), streams=[stream], auto_commit=None)
            assert consumer.wait_for_assignment(15) == {(stream, p) for p in ALL}
            for _ in ALL:
                assert stuck.acquire(timeout=15)
            began = time.monotonic()
            consumer.close()
            took = time.monotonic() - began
            # One deadline (2 s), not one per thread (4 x 2 s).
            assert took < 4.0, took
            (warned,) = [r.getMessage() for r in caplog.records if "stuck in a call" in r.msg]
            assert all(f"liftbridge-consumer-{stream}-{p}" in warned for p in ALL)
    finally:
        release.set()
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())


def test_a_partition_read_from_its_end_without_a_cursor_loses_nothing_when_it_moves(
    client: Client, stream: str
) -> None:
    # The default start (new-only) reads a partition without a cursor from its end. A
    # member that has read nothing of it yet commits nothing; its next owner found no
    # cursor either and started at the end as it was then: what came in between was
    # read by no member.
    group = unique("g")
    old = publish_batch(client, stream, "old", 8)  # before the group: never read
    a = client.consumer(group, streams=[stream], auto_commit=60.0)
    try:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}

        def subscribed() -> bool:
            with a._lock:
                return all(r.sub is not None for r in a._readers._readers.values())

        wait_until(subscribed, 15, "a reading every partition")
        between = publish_batch(client, stream, "between", 8)
    finally:
        a.close()  # nothing of it processed: nothing to commit
    with client.consumer(group, streams=[stream], auto_commit=None) as b:
        got = {b.get(10).value for _ in between}
        assert got == between and not got & old


@pytest.mark.parametrize("auto_commit", [60.0, None], ids=["auto-commit", "no-auto-commit"])
def test_a_paused_partition_read_from_its_end_loses_nothing_published_to_resume_it(
    client: Client, caplog: pytest.LogCaptureFixture, auto_commit: float | None
) -> None:
    # Found by a probe: a member starting a paused partition from its end (new-only) is
    # refused (paused) and its reader is restarted at the next poll. The restarted
    # reader looked the end up again: the publish meanwhile, which resumed the
    # partition, was skipped, and with auto-commit the end then found was stored as the
    # group's cursor, so no member ever read it. The end is pinned once per assignment
    # (without auto-commit too: the server evaluated the start again at each subscribe).
    name = unique("paused")
    client.create_stream(name, name)
    for i in range(3):
        client.publish(name, b"old-%d" % i)
    client.pause_stream(name)
    with caplog.at_level(logging.WARNING, logger="liftbridge_sync.consumer"):
        group = unique("g")
        with client.consumer(group, streams=[name], auto_commit=auto_commit) as consumer:
            assert consumer.wait_for_assignment(15) == {(name, 0)}
            wait_until(lambda: "is paused" in caplog.text, 15, "the reader refused: paused")
            stored_at_start = client.fetch_cursor(consumer.cursor_id, name, 0)
            ack = client.publish(name, b"resumes")
            assert ack is not None and ack.offset == 3
            got = consumer.get(15)
            assert (got.offset, got.value) == (3, b"resumes")
            client.publish(name, b"after")
            assert consumer.get(10).value == b"after"
            with pytest.raises(TimeoutError):
                consumer.get(0.5)  # nothing twice
    # With auto-commit, stored at once, before the subscribe was refused: the end found
    # at the assignment. Without, only commit() stores cursors.
    assert stored_at_start == (2 if auto_commit else -1)


def test_a_reader_revoked_as_it_starts_stores_no_cursor_over_the_new_owners(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found in review: with auto-commit, a reader starting from a partition's end stores
    # that end as its cursor. One whose partition was taken away while it looked the end
    # up (a slow leader) stored it all the same, over what the new owner had committed
    # since: the cursor moved back, and the partition's next owner read it all again.
    fetch = leader_module.fetch_partition_metadata
    looking: list[threading.Thread] = []
    go = threading.Event()

    def slow(
        core: ClientCore, s: str, partition: int, *, abort: DialAbort | None = None
    ) -> PartitionMetadata:
        meta = fetch(core, s, partition, abort=abort)
        if (s, partition) == (stream, 0) and not looking:
            looking.append(threading.current_thread())
            go.wait(30)
        return meta

    monkeypatch.setattr(leader_module, "fetch_partition_metadata", slow)
    publish_batch(client, stream, "old", PARTITIONS)  # offset 0 in each partition
    group = unique("g")
    # Ties go to the lower id: "m1" is given partitions 0 and 2 when it joins.
    a = client.consumer(group, streams=[stream], auto_commit=60.0, consumer_id="m2")
    try:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        wait_until(lambda: bool(looking), 15, "a's reader of partition 0 looking its end up")
        start = StartAt.earliest()
        with client.consumer(
            group, streams=[stream], auto_commit=None, consumer_id="m1", start=start
        ) as b:
            wait_until(lambda: partitions_of(a) == {1, 3}, 15, "a revoked 0 and 2")
            client.publish(stream, b"new", partition=0)  # offset 1
            # b reads partition 0 from its start (offsets 0 and 1); partition 2 from
            # after the cursor a's reader stored there (its end: nothing).
            got = {(m.partition, m.offset) for m in (b.get(10) for _ in range(2))}
            assert got == {(0, 0), (0, 1)}
            assert b.commit()[(stream, 0)] == 1
            go.set()
            looking[0].join(15)
            assert not looking[0].is_alive()
            assert client.fetch_cursor(a.cursor_id, stream, 0) == 1
    finally:
        go.set()
        a.close()


def test_an_empty_partition_read_from_its_end_loses_nothing_published_as_the_reader_starts(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With auto-commit, a reader starting from the end looks the end up first, to store
    # it as the cursor. An empty partition has none to store, and the reader then
    # subscribed "new only": what was published between the look-up and the subscribe
    # was read by no member (it has no cursor either). It now starts at offset 0.
    fetch = leader_module.fetch_partition_metadata
    published: list[bytes] = []

    def then_publish(
        core: ClientCore, s: str, partition: int, *, abort: DialAbort | None = None
    ) -> PartitionMetadata:
        meta = fetch(core, s, partition, abort=abort)
        if s == stream and partition == 0 and not published:
            published.append(b"as the reader starts")
            client.publish(stream, published[0], partition=0)
        return meta

    monkeypatch.setattr(leader_module, "fetch_partition_metadata", then_publish)
    with client.consumer(unique("g"), streams=[stream], auto_commit=60.0) as a:
        assert a.wait_for_assignment(15) == {(stream, p) for p in ALL}
        assert a.get(10).value == b"as the reader starts"
    assert published == [b"as the reader starts"]


@pytest.mark.parametrize("in_a_cycle", [False, True], ids=["refcount", "collector"])
def test_a_member_dropped_without_close_leaves_and_its_partitions_move(
    client: Client, stream: str, caplog: pytest.LogCaptureFixture, in_a_cycle: bool
) -> None:
    # In a cycle it is freed by the collector, which clears the weak references to it
    # (the client's included) before its __del__ puts it back.
    group = unique("g")
    b = client.consumer(group, streams=[stream], auto_commit=None)
    try:
        held = [client.consumer(group, streams=[stream], auto_commit=0.5)]
        wait_until(lambda: split_evenly(held[0], b), 15, "two partitions each")
        own = list(held[0]._threads.started)  # heartbeat and commit (b has no commit thread)
        dropped = weakref.ref(held[0])
        if in_a_cycle:
            held[0].cycle = [held[0]]  # type: ignore[attr-defined]
        with caplog.at_level(logging.WARNING, logger="liftbridge_sync.consumer"):
            held.clear()  # without close()
            gc.collect()
            # Its heartbeat closes it within an interval (0.8 s): it leaves the group.
            wait_until(lambda: partitions_of(b) == set(ALL), 10, "b owns every partition")
            wait_until(lambda: not any(t.is_alive() for t in own), 10, "its threads ended")
            wait_until(lambda: gc.collect() >= 0 and dropped() is None, 10, "collected")
        assert "dropped without close(): closing" in caplog.text
        assert not b.closed
    finally:
        b.close()
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())


@pytest.mark.parametrize("in_a_cycle", [False, True], ids=["refcount", "collector"])
def test_client_close_closes_a_member_dropped_without_close_and_joins_its_threads(
    group_server: LiftbridgeServer, stream: str, caplog: pytest.LogCaptureFixture, in_a_cycle: bool
) -> None:
    # A consumer collected without close() waits for its heartbeat thread to close it at
    # the next poll (0.8 s here); freed by the collector, the client no longer held it,
    # so Client.close() returned with its threads still running for up to that long.
    client = Client(group_server.address)
    try:
        held = [client.consumer(unique("g"), streams=[stream], auto_commit=5.0)]
        held[0].wait_for_assignment(15)
        own = list(held[0]._threads.started)  # its heartbeat and commit threads
        if in_a_cycle:
            held[0].cycle = [held[0]]  # type: ignore[attr-defined]
        with caplog.at_level(logging.WARNING, logger="liftbridge_sync.consumer"):
            held.clear()  # without close()
            gc.collect()
            client.close()
        assert [t.name for t in own if t.is_alive()] == []
        if in_a_cycle:  # else the client may still hold it, and closes it unawares
            assert "dropped without close(): closing" in caplog.text
    finally:
        client.close()


def test_a_join_whose_answer_was_lost_and_was_retried_joins_the_group(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: the connection breaks after the server applied the join, before its
    # answer arrives (UNAVAILABLE, retried). The retry was refused "already a member"
    # and Client.consumer() raised ServerError, leaving the member registered, holding
    # partitions nobody read, until the server's consumer timeout.
    invoke = client._core.invoke
    lost: list[str] = []

    def losing(address: str, rpc: Any, request: Any, **kwargs: Any) -> Any:
        response = invoke(address, rpc, request, **kwargs)
        if rpc is rpcs.JOIN_CONSUMER_GROUP and not lost:
            lost.append(request.consumerId)
            raise BrokerUnavailableError(
                "consumer group: broker unavailable: Socket closed",
                code="UNAVAILABLE",
                details="Socket closed",
            )
        return response

    monkeypatch.setattr(client._core, "invoke", losing)
    group = unique("g")
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as m1:
        assert lost == ["m1"]
        assert m1.wait_for_assignment(15) == {(stream, p) for p in ALL}
        # One member m1, not a ghost beside it: a second member gets half the partitions.
        with client.consumer(group, streams=[stream], auto_commit=None) as m2:
            wait_until(lambda: split_evenly(m1, m2), 15, "two partitions each")


def test_a_join_that_failed_after_the_server_applied_it_leaves_the_group(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: the join's deadline expires (a slow metadata leader) after the server
    # applied it. DEADLINE_EXCEEDED is not retried, and Client.consumer() raised it with
    # the member left in the group, holding partitions nobody read until the server's
    # consumer timeout, and its id refused ("already a member") until then.
    invoke = client._core.invoke
    expired: list[str] = []

    def expiring(address: str, rpc: Any, request: Any, **kwargs: Any) -> Any:
        response = invoke(address, rpc, request, **kwargs)
        if rpc is rpcs.JOIN_CONSUMER_GROUP and not expired:
            expired.append(request.consumerId)
            raise DeadlineExceededError(
                "consumer group: deadline exceeded: Deadline Exceeded",
                code="DEADLINE_EXCEEDED",
                details="Deadline Exceeded",
            )
        return response

    monkeypatch.setattr(client._core, "invoke", expiring)
    group = unique("g")
    with pytest.raises(DeadlineExceededError):
        client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1")
    assert expired == ["m1"]
    assert not any(t.name.startswith("liftbridge-consumer") for t in _threads())
    # It left the group: its id is free at once, and it is the group's only member.
    with client.consumer(group, streams=[stream], auto_commit=None, consumer_id="m1") as m1:
        assert m1.wait_for_assignment(15) == {(stream, p) for p in ALL}


@pytest.mark.parametrize("where", ["marking it closed", "stopping the readers", "the final commit"])
def test_a_close_interrupted_midway_still_ends_every_thread(
    client: Client, stream: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A fault: Ctrl-C (its handler's KeyboardInterrupt) while close() waits, e.g. a
    # second one while it joins the readers or commits. The heartbeat polled on,
    # keeping the member in its group with partitions nobody read for the process's
    # life (a second close(), Client.close()'s, found the first one ended). Found in
    # review: one landing as close() marks the consumer closed, before its cleanup
    # began, left everything running, the iteration blocked, and a second close()
    # waiting for the first to end for its whole bound (about a minute), in vain.
    member = client.consumer(unique("g"), streams=[stream], auto_commit=5.0)
    member.wait_for_assignment(15)
    own = list(member._threads.started)

    def interrupted(*args: object) -> list[str]:
        raise KeyboardInterrupt

    if where == "marking it closed":
        monkeypatch.setattr(member._threads, "closing", interrupted)
    elif where == "stopping the readers":
        monkeypatch.setattr(member._readers, "stop_all", interrupted)
    else:
        monkeypatch.setattr(member._autocommit, "final", interrupted)
    with pytest.raises(KeyboardInterrupt):
        member.close()
    monkeypatch.undo()
    wait_until(
        lambda: not any(t.name.startswith("liftbridge-consumer") for t in _threads()),
        10,
        f"its threads {[t.name for t in own]} and readers to end",
    )
    with pytest.raises(StopIteration):  # the iteration ended
        member.get(0.1)
    began = time.monotonic()
    member.close()  # a second close() finds the first one ended
    assert time.monotonic() - began < 5.0
