"""The look-up of a timestamp start's offset (a temporary subscription's first message)
keeps to ``rpc_timeout``: a broker that answered the handshake and then sent nothing
held ``subscribe()`` for ever, and ``Client.close()`` from another thread did not end
it (the temporary subscription was not the client's to close)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc

from liftbridge_sync import Client, StartAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.errors import ClientClosedError, DeadlineExceededError
from liftbridge_sync.testing import FakeBroker, fake_message, serve
from tests.waiting import wait_until

_RPC_TIMEOUT = 1.0


def _subscribing(client: Client) -> tuple[threading.Thread, list[BaseException], threading.Event]:
    """``subscribe()`` from a timestamp, on a thread of its own: what it raised, and
    an event set once it returned."""
    raised: list[BaseException] = []
    done = threading.Event()

    def subscribe() -> None:
        try:
            client.subscribe("s", start=StartAt.timestamp(1))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=subscribe, name="test-subscriber", daemon=True)
    thread.start()
    return thread, raised, done


class _LeaderGoesQuiet(FakeBroker):
    """A broker whose ``FetchPartitionMetadata`` fails after its first answer (the one
    the start is pinned with): the subscription cannot tell its silence from deleted
    messages, and goes on waiting."""

    def FetchPartitionMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchPartitionMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchPartitionMetadataResponse:
        if self.partition_metadata_calls >= 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: metadata unavailable")
        return super().FetchPartitionMetadata(request, context)


def test_a_timestamp_look_up_that_gets_no_message_times_out() -> None:
    broker = _LeaderGoesQuiet("a")
    broker.start()
    broker.cluster.newest_offset = 5  # committed messages: the look-up reads one
    # Every call: the handshake, then nothing.
    broker.subscribe_scripts = [serve([], "hang") for _ in range(100)]
    try:
        with Client([broker.address], rpc_timeout=_RPC_TIMEOUT, resubscribe_wait=1.0) as client:
            thread, raised, done = _subscribing(client)
            assert done.wait(2 * _RPC_TIMEOUT + 5)
            (error,) = raised
            assert isinstance(error, DeadlineExceededError)
            assert "timestamp" in str(error)
            thread.join(10)
    finally:
        broker.stop()


def test_a_timestamp_look_up_whose_messages_were_deleted_still_ends_with_none() -> None:
    # The bound leaves room for what tells deleted messages from a slow leader: a
    # silence of rpc_timeout, then the leader's answer (its high watermark).
    broker = FakeBroker("a").start()
    broker.cluster.newest_offset = 5
    broker.subscribe_scripts = [serve([], "hang") for _ in range(100)]
    try:
        with Client([broker.address], rpc_timeout=_RPC_TIMEOUT, resubscribe_wait=1.0) as client:
            sub = client.subscribe("s", start=StartAt.timestamp(1))
            assert sub._target.start_offset == 6  # every message older (deleted)
            sub.close()
    finally:
        broker.stop()


def test_client_close_ends_a_timestamp_look_up() -> None:
    broker = FakeBroker("a").start()
    broker.cluster.newest_offset = 5
    broker.subscribe_scripts = [serve([], "hang")]
    try:
        client = Client([broker.address], rpc_timeout=30.0, resubscribe_wait=1.0)
        try:
            thread, raised, done = _subscribing(client)
            wait_until(lambda: len(broker.subscribe_requests) == 1, 10)
            client.close()
            assert done.wait(5)
            (error,) = raised
            assert isinstance(error, ClientClosedError)
            thread.join(10)
        finally:
            client.close()
    finally:
        broker.stop()


def _slow_reads(delay: float) -> FakeBroker:
    """A broker that answers a timestamp probe with nothing (v1.9.0's wrong answer),
    so the look-up bisects, and serves every read at an offset ``delay`` seconds late
    (within the per-read bound): a message at that offset, as new as any start."""
    broker = FakeBroker("a")

    def slow(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()  # the handshake
        if request.startPosition == api_pb2.TIMESTAMP:
            return  # ended with OK: nothing at or after the time
        # The fault: a slow leader (not synchronisation; the client waits on its bound).
        threading.Event().wait(delay)
        message = fake_message(request.startOffset)
        message.timestamp = 1 << 62
        yield message
        while context.is_active():
            threading.Event().wait(0.02)

    broker.subscribe_scripts = [slow for _ in range(1000)]
    return broker


def test_a_timestamp_look_up_of_slow_reads_keeps_to_one_bound() -> None:
    # 2**20 offsets: the newest message and 20 bisect steps, each read 0.4 s late,
    # took over 8 s, well past the look-up's one bound (two reads' bounds of three
    # rpc_timeouts each, the most a deleted range takes to be known).
    broker = _slow_reads(0.4 * _RPC_TIMEOUT)
    broker.start()
    broker.cluster.newest_offset = 1 << 20
    try:
        with Client([broker.address], rpc_timeout=_RPC_TIMEOUT, resubscribe_wait=1.0) as client:
            thread, raised, done = _subscribing(client)
            assert done.wait(6 * _RPC_TIMEOUT + 1.5), "the look-up outlasted its bound"
            (error,) = raised
            assert isinstance(error, DeadlineExceededError)
            assert "timestamp start" in str(error)
            thread.join(10)
    finally:
        broker.stop()
