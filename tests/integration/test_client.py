"""Connection handling and stream administration against the real server."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, ClientOptions, RetryPolicy
from liftbridge_sync.testing import LiftbridgeServer

from .conftest import StreamFactory, unique

pytestmark = pytest.mark.integration


def test_construction_is_lazy_no_network_no_threads() -> None:
    before = set(threading.enumerate())
    client = Client(["127.0.0.1:1", "127.0.0.1:2"])  # nothing listens there
    assert set(threading.enumerate()) == before
    assert not client._core.pool.connected
    client.close()
    client.close()  # idempotent
    with pytest.raises(lb.ClientClosedError):
        client.fetch_metadata()


def test_unreachable_cluster_gives_broker_unavailable_after_retries() -> None:
    policy = RetryPolicy(max_attempts=3, max_delay=2.0, initial=0.01, maximum=0.02, jitter=0.0)
    with Client("127.0.0.1:1", retry=policy, rpc_timeout=1.0) as client:
        with pytest.raises(lb.BrokerUnavailableError):
            client.fetch_metadata()


def test_bad_arguments_fail_before_the_wire() -> None:
    # The address is unreachable: reaching the network would raise BrokerUnavailable.
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        for call in (
            lambda: client.create_stream("s", "n", partitions=-1),
            lambda: client.create_stream("s", "n", partitions=0),
            lambda: client.create_stream("", "n"),
            lambda: client.create_stream("s", "__cursors"),
            lambda: client.create_stream("s", "with space"),
            lambda: client.create_stream("s", "n", retention_max_bytes=-1),
            lambda: client.create_stream("s", "n", cleaner_interval=0),
            lambda: client.pause_stream("n", partitions=[-1]),
            lambda: client.set_cursor("", "s", 0, 1),
            lambda: client.set_cursor("c", "s", 0, -2),
            lambda: client.fetch_partition_metadata("s", -1),
        ):
            with pytest.raises(lb.ConfigurationError):
                call()
        with pytest.raises(TypeError, match="encode"):
            client.publish("s", "text")  # type: ignore[arg-type]


def test_create_stream_with_every_option(liftbridge_client: Client) -> None:
    name = unique()
    created = liftbridge_client.create_stream(
        f"{name}.subject",
        name,
        partitions=3,
        replication_factor=1,
        group="workers",
        retention_max_bytes=10 * 1024 * 1024,
        retention_max_messages=100_000,
        retention_max_age=timedelta(days=1),
        cleaner_interval=60.0,
        segment_max_bytes=1024 * 1024,
        segment_max_age=3600,
        compact_enabled=True,
        compact_max_goroutines=2,
        auto_pause_time=0,
        auto_pause_disable_if_subscribers=True,
        min_isr=1,
        optimistic_concurrency_control=False,
        encryption=False,
    )
    assert created is True
    info = liftbridge_client.fetch_metadata(name).streams[name]
    assert info.subject == f"{name}.subject"
    assert sorted(info.partitions) == [0, 1, 2]
    assert info.creation_timestamp is not None
    assert liftbridge_client.publish(name, b"x", partition=2).partition == 2  # type: ignore[union-attr]
    liftbridge_client.delete_stream(name)


def test_create_existing_stream(liftbridge_client: Client, new_stream: StreamFactory) -> None:
    name = new_stream()
    with pytest.raises(lb.StreamExistsError):
        liftbridge_client.create_stream("other.subject", name)
    assert liftbridge_client.create_stream(name, name, exist_ok=True) is False


def test_server_side_refusals_are_typed(liftbridge_client: Client) -> None:
    # Replication factor larger than the cluster: the server refuses it.
    with pytest.raises(lb.InvalidArgumentError):
        liftbridge_client.create_stream(unique(), unique(), replication_factor=3)
    # Encryption without LIFTBRIDGE_ENCRYPTION_KEY on the server.
    with pytest.raises(lb.ServerError, match="encryption"):
        liftbridge_client.create_stream(unique(), unique(), encryption=True)
    # A request over the server's 4 MiB was sent: not MessageTooLargeError (documented
    # as never sent, and a ConfigurationError).
    names = [f"{i:0>200}" for i in range(30_000)]
    with pytest.raises(lb.ServerError, match="larger than gRPC's limit") as refused:
        liftbridge_client.fetch_metadata(*names)
    assert not isinstance(refused.value, lb.ConfigurationError)


# One of each class that panicked a v1.9.0 server inside its Raft apply, for good.
SERVER_KILLING_NAMES = [".", "..", ".a", "orders.", "a..b", "../x", "a/b", "*", "n" * 256]


@pytest.mark.parametrize("bad", SERVER_KILLING_NAMES)
def test_stream_names_that_would_kill_the_server_are_refused(
    liftbridge_client: Client, bad: str
) -> None:
    with pytest.raises(lb.ConfigurationError, match="'name'"):
        liftbridge_client.create_stream("orders.x", bad)
    # The server is still up and serves a good stream end to end.
    name = unique()
    liftbridge_client.create_stream(name, name)
    try:
        streams = liftbridge_client.fetch_metadata().streams
        assert name in streams and bad not in streams
        ack = liftbridge_client.publish(name, b"alive")
        assert ack is not None and ack.offset == 0
    finally:
        liftbridge_client.delete_stream(name)


@pytest.mark.parametrize(
    ("subject", "partitions", "refused"),
    [
        ("a.>.b", 1, "'>' token before its last"),
        ("a.>", 2, "ends with '>', which a stream of 2 partitions"),
        (">", 1, "'>' alone would store every message"),
    ],
)
def test_stream_subjects_that_would_ruin_the_server_are_refused(
    liftbridge_client: Client, subject: str, partitions: int, refused: str
) -> None:
    """``"a.>.b"``, or ``"a.>"`` with a partition 1 (``"a.>.1"``), broke the server's NATS
    connection when accepted: every publish then timed out, the next stream's creation
    panicked the server, and it never started again on its data (v1.9.0)."""
    name = unique()
    with pytest.raises(lb.ConfigurationError, match=refused):
        liftbridge_client.create_stream(subject, name, partitions=partitions)
    assert name not in liftbridge_client.fetch_metadata().streams
    # A '>' that ends the subject of a one-partition stream is valid, and works.
    prefix = unique()
    liftbridge_client.create_stream(f"{prefix}.>", name)
    try:
        with liftbridge_client.subscribe(name) as messages:
            liftbridge_client.publish_to_subject(f"{prefix}.x.y", b"caught")
            assert messages.get(timeout=10).value == b"caught"
    finally:
        liftbridge_client.delete_stream(name)


def test_min_isr_above_the_cluster_is_refused_for_every_server_replication(
    liftbridge_client: Client,
) -> None:
    """With ``replication_factor=-1`` the server took ``min_isr=2`` on one server: its
    messages were acknowledged with LEADER but never committed (none could be read)."""
    name = unique()
    with pytest.raises(lb.ConfigurationError, match=r"'min_isr' \(2\) is above the cluster's 1"):
        liftbridge_client.create_stream(name, name, replication_factor=-1, min_isr=2)
    assert name not in liftbridge_client.fetch_metadata().streams
    liftbridge_client.create_stream(name, name, replication_factor=-1, min_isr=1)
    try:
        assert liftbridge_client.publish(name, b"committed") is not None
        with liftbridge_client.subscribe(name, start=lb.StartAt.earliest()) as messages:
            assert messages.get(timeout=10).value == b"committed"
    finally:
        liftbridge_client.delete_stream(name)


@pytest.mark.parametrize("reserved", ["__cursors", "__activity"])
def test_the_servers_own_streams_are_not_published_to(
    liftbridge_client: Client, new_stream: StreamFactory, reserved: str
) -> None:
    """The server stores what is published to ``__cursors`` and ``__activity`` and reads
    it back as its own records: a cursor message could overwrite any cursor."""
    liftbridge_client.set_cursor(unique(), new_stream(), 0, 0)  # __cursors exists
    before = liftbridge_client.fetch_partition_metadata("__cursors", 0).newest_offset
    with pytest.raises(lb.ConfigurationError, match=f"'stream': '{reserved}' is reserved"):
        liftbridge_client.publish(reserved, b"forged", key=b"c,s,0")
    with pytest.raises(lb.ConfigurationError, match="is reserved"):
        liftbridge_client.publish_async(reserved, b"forged")
    with pytest.raises(lb.ConfigurationError, match="is reserved"):
        liftbridge_client.publish_batch(reserved, [b"forged"])
    assert liftbridge_client.fetch_partition_metadata("__cursors", 0).newest_offset == before


def test_the_servers_own_subjects_are_not_published_to(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """``publish_to_subject`` reached them by subject: what the README says is refused
    was stored in ``__cursors`` and ``__activity`` all the same."""
    liftbridge_client.set_cursor(unique(), new_stream(), 0, 0)  # __cursors exists
    cursors = liftbridge_client.fetch_metadata("__cursors").streams["__cursors"]
    namespace = cursors.subject.removesuffix(".cursors")
    assert namespace != cursors.subject
    before = {
        (name, p): liftbridge_client.fetch_partition_metadata(name, p).newest_offset
        for name, count in (("__cursors", len(cursors.partitions)), ("__activity", 1))
        for p in range(count)
    }
    for subject in (f"{namespace}.cursors", f"{namespace}.cursors.1", f"{namespace}.activity"):
        with pytest.raises(lb.ConfigurationError, match="is the server's own stream"):
            liftbridge_client.publish_to_subject(subject, b"forged", key=b"c,s,0")
    # A look-alike is any other subject (nobody listens: no ack wanted, none comes).
    lookalike = f"{namespace}.cursorsx"
    assert (
        liftbridge_client.publish_to_subject(lookalike, b"v", ack_policy=lb.AckPolicy.NONE) is None
    )
    after = {key: liftbridge_client.fetch_partition_metadata(*key).newest_offset for key in before}
    assert after == before


def test_delete_stream(liftbridge_client: Client) -> None:
    name = unique()
    liftbridge_client.create_stream(name, name)
    liftbridge_client.delete_stream(name)
    assert name not in liftbridge_client.fetch_metadata().streams
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.delete_stream(name)


def test_pause_and_publish_to_paused(liftbridge_client: Client, new_stream: StreamFactory) -> None:
    name = new_stream(partitions=3)
    liftbridge_client.pause_stream(name, partitions=[1])
    assert liftbridge_client.fetch_partition_metadata(name, 1).paused
    assert not liftbridge_client.fetch_partition_metadata(name, 0).paused
    liftbridge_client.pause_stream(name, resume_all=True)
    assert all(liftbridge_client.fetch_partition_metadata(name, p).paused for p in range(3))
    # Publishing to a paused partition resumes it server-side and stores the message.
    # (v1.9.0 does not reliably clear the reported ``paused`` flag afterwards, so the
    # test checks the stored data, which is what a publisher relies on.)
    ack = liftbridge_client.publish(name, b"wake", partition=2)
    assert ack is not None and ack.offset == 0
    assert liftbridge_client.fetch_partition_metadata(name, 2).newest_offset == 0
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.pause_stream(unique())
    with pytest.raises(lb.NoSuchPartitionError):
        liftbridge_client.pause_stream(name, partitions=[7])


def test_readonly(liftbridge_client: Client, new_stream: StreamFactory) -> None:
    name = new_stream(partitions=2)
    liftbridge_client.set_stream_readonly(name, partitions=[0])
    assert liftbridge_client.fetch_partition_metadata(name, 0).readonly
    with pytest.raises(lb.ReadonlyPartitionError):
        liftbridge_client.publish(name, b"refused", partition=0)
    assert liftbridge_client.publish(name, b"fine", partition=1) is not None
    liftbridge_client.set_stream_readonly(name, readonly=False)
    assert liftbridge_client.publish(name, b"again", partition=0) is not None
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.set_stream_readonly(unique())
    with pytest.raises(lb.NoSuchPartitionError):
        liftbridge_client.set_stream_readonly(name, partitions=[5])


def test_partition_metadata_is_authoritative(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream()
    empty = liftbridge_client.fetch_partition_metadata(name, 0)
    assert (empty.high_watermark, empty.newest_offset) == (-1, -1)
    for i in range(5):
        liftbridge_client.publish(name, b"%d" % i)
    meta = liftbridge_client.fetch_partition_metadata(name, 0)
    assert meta.newest_offset == 4 and meta.high_watermark == 4
    assert meta.leader and meta.isr == (meta.leader,)
    assert meta.messages_received.latest is not None
    with pytest.raises(lb.NoSuchPartitionError):
        liftbridge_client.fetch_partition_metadata(name, 3)
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.fetch_partition_metadata(unique(), 0)


def test_cursors_round_trip_and_route_like_go(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=2)
    cursors = liftbridge_client.fetch_metadata("__cursors").streams["__cursors"]
    count = len(cursors.partitions)
    assert count >= 2
    ids = [f"c{i}" for i in range(8)]
    # The ids land on more than one __cursors partition, so routing is exercised.
    targets = {zlib.crc32(f"{i},{name},1".encode()) % count for i in ids}
    assert len(targets) > 1
    for offset, cursor_id in enumerate(ids):
        assert liftbridge_client.fetch_cursor(cursor_id, name, 1) == -1
        liftbridge_client.set_cursor(cursor_id, name, 1, offset)
    assert [liftbridge_client.fetch_cursor(c, name, 1) for c in ids] == list(range(8))
    liftbridge_client.set_cursor("c0", name, 1, 99)
    assert liftbridge_client.fetch_cursor("c0", name, 1) == 99
    assert liftbridge_client.fetch_cursor("c0", name, 0) == -1


def test_no_cursor_for_a_missing_stream_or_partition(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream(partitions=2)
    missing = unique()
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.set_cursor("c", missing, 0, 5)
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.fetch_cursor("c", missing, 0)
    for call in (
        lambda: liftbridge_client.set_cursor("c", name, 99, 5),
        lambda: liftbridge_client.fetch_cursor("c", name, 2),
    ):
        with pytest.raises(lb.NoSuchPartitionError):
            call()
    # A stream another client created a moment ago is found (the metadata of this one
    # is refreshed once), and the refused call above stored nothing under its name.
    liftbridge_client.fetch_metadata()  # a cached snapshot without it
    with Client(liftbridge_address) as other:
        other.create_stream(missing, missing)
    try:
        assert liftbridge_client.fetch_cursor("c", missing, 0) == -1
        liftbridge_client.set_cursor("c", missing, 0, 7)
        assert liftbridge_client.fetch_cursor("c", missing, 0) == 7
    finally:
        liftbridge_client.delete_stream(missing)
    # A deleted stream is refused too: its cursors can no longer be written.
    with pytest.raises(lb.NoSuchStreamError):
        liftbridge_client.set_cursor("c", missing, 0, 8)


def test_fetch_metadata_always_asks_the_server(
    liftbridge_client: Client, liftbridge_address: str
) -> None:
    first = liftbridge_client.fetch_metadata()
    name = unique()
    with Client(liftbridge_address) as other:
        other.create_stream(name, name)
    assert name not in first.streams
    assert name in liftbridge_client.fetch_metadata().streams
    assert list(liftbridge_client.fetch_metadata(name, unique()).streams) == [name]
    liftbridge_client.delete_stream(name)


def test_many_threads_share_one_client(liftbridge_client: Client) -> None:
    names = [unique() for _ in range(16)]

    def work(name: str) -> int:
        liftbridge_client.create_stream(name, name, partitions=2)
        liftbridge_client.publish(name, b"x", partition=1)
        offset = liftbridge_client.fetch_partition_metadata(name, 1).newest_offset
        liftbridge_client.delete_stream(name)
        return offset

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(work, names)) == [0] * len(names)


def test_client_refuses_pickling_but_options_travel(liftbridge_address: str) -> None:
    with Client(liftbridge_address) as client:
        with pytest.raises(TypeError, match="for_process"):
            pickle.dumps(client)
        options = pickle.loads(pickle.dumps(client.options))
    shared = Client.for_process(options)
    try:
        assert Client.for_process(options) is shared
        assert shared.fetch_metadata().brokers
    finally:
        shared.close()
    assert Client.for_process(options) is not shared
    Client.for_process(options).close()


_FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from liftbridge_sync import Client, ClientOptions, ForkedClientError, StartAt
    address, stream, forks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = ClientOptions(addresses=(address,))
    client = Client.from_options(options)
    # Used before the fork as a pre-forking server's master would (gunicorn --preload):
    # connected, with metadata cached, and a subscription object from the parent.
    client.fetch_metadata()
    client.create_stream(stream + "-parent", stream + "-parent")
    carried = client.subscribe(stream + "-parent", start=StartAt.earliest())
    carried.close()  # no gRPC stream may be live at fork time (see README)
    stop = threading.Event()

    def registry():
        while not stop.is_set():
            Client.for_process(options)

    # A parent thread hammers the per-process registry, whose lock a child must not
    # inherit.
    threads = [threading.Thread(target=registry)]
    for t in threads:
        t.start()
    codes = []
    for i in range(forks):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                try:
                    carried.get(1)
                    code = 40  # a subscription from the parent must not read in the child
                except ForkedClientError:
                    pass
                ack = client.publish(stream, b"child-%d" % i)  # the inherited client
                with client.subscribe(stream, start=StartAt.offset(ack.offset)) as sub:
                    code = code or (0 if sub.get(10).value == b"child-%d" % i else 41)
                fresh = Client.for_process(options)
                code = code or (0 if fresh.fetch_metadata().brokers else 42)
                client.close()
                fresh.close()
            except BaseException as exc:
                print("child", i, type(exc).__name__, exc, file=sys.stderr, flush=True)
                code = code or 30
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    stop.set()
    for t in threads:
        t.join(30)
    client.publish(stream, b"parent-after")  # the parent's client is unaffected
    client.delete_stream(stream + "-parent")
    client.close()
    print(codes)
    sys.exit(max(codes))
    """
)


def test_a_client_used_before_fork_works_in_every_child(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    """Children forked while a parent thread calls for_process in a loop all finish.

    Each child uses the inherited (connected) client with fresh connections, as redis-py
    does; a subscription carried across the fork refuses to read there; no lock of the
    library is held in the child, so no child hangs. (Forking while a gRPC stream is live
    in the parent can abort the child inside grpcio's own poller; see README.)
    """
    stream = new_stream()
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _FORK_SCRIPT, liftbridge_address, stream, "12"],
        timeout=240,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == str([0] * 12)


def test_leader_routed_calls_follow_a_restarted_server() -> None:
    """After a server restart, cached channels and metadata recover under the retry policy."""
    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            name = unique()
            client.create_stream(name, name)
            client.publish(name, b"before")
            server.restart()
            assert client.fetch_partition_metadata(name, 0).newest_offset == 0
            assert client.publish(name, b"after").offset == 1  # type: ignore[union-attr]
            # Cursor RPCs are routed to the __cursors leader again after the restart.
            client.set_cursor("c", name, 0, 1)
            assert client.fetch_cursor("c", name, 0) == 1


@pytest.mark.parametrize("kill", [False, True], ids=["SIGINT", "SIGKILL"])
def test_cursors_set_just_before_a_restart_read_back_after_it(kill: bool) -> None:
    """v1.9.0 recovers a partition's high watermark from a checkpoint written every 5 s
    (not at shutdown) and reads cursors only up to it: cursors set in the seconds before
    a restart read back as -1, or as an older value, until the partition commits
    something new. The client makes that commit before it reads a cursor."""
    with LiftbridgeServer(cursors_partitions=3) as server:
        name = unique()
        ids = [f"c{i}" for i in range(12)]  # on every __cursors partition
        with Client(server.address) as client:
            client.create_stream(name, name)
            for offset, cursor_id in enumerate(ids):
                client.set_cursor(cursor_id, name, 0, offset)
                client.set_cursor(cursor_id, name, 0, offset + 100)  # moved on once
        server.restart(kill=kill)
        with Client(server.address) as client:
            assert [client.fetch_cursor(c, name, 0) for c in ids] == [
                offset + 100 for offset in range(len(ids))
            ]
            # Cursors of ours set afterwards are read as they are, and the ones the
            # client stored to make the partitions commit are none of the user's.
            client.set_cursor(ids[0], name, 0, 7)
            assert client.fetch_cursor(ids[0], name, 0) == 7


def test_options_object_and_kwargs_agree(liftbridge_address: str) -> None:
    options = ClientOptions(addresses=(liftbridge_address,), ack_timeout=2.0)
    client = Client.from_options(options)
    assert client.options == Client(liftbridge_address, ack_timeout=2.0).options
    client.close()
