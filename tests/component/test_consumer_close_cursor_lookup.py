"""A consumer's ``close()`` ends a partition reader looking up its cursor's ``__cursors``
partition at once: the look-up (``cursor_target``: the ``__cursors`` stream's metadata,
fetched when the cache lacks it) retried under the whole retry policy, its back-offs
not cut short by the consumer closing, and close() waited for the reader thread until
its bound (``2 × rpc_timeout + 1`` seconds), then left it running with a WARNING."""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest

from liftbridge_sync import Client, ClientOptions, RetryPolicy
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.consumer import Consumer
from liftbridge_sync.testing import FakeBroker
from tests.waiting import wait_until

#: Long back-offs: the look-up is nearly always asleep between its attempts.
_SLOW = RetryPolicy(max_attempts=1_000_000, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0)
_RPC_TIMEOUT = 5.0


class _NoCursorsMetadata(FakeBroker):
    """A coordinator that assigns partition 0 of ``s`` to every member, and whose
    metadata for ``__cursors`` (not listed among all streams) fails (the fault: the
    broker answering it is unavailable)."""

    def __init__(self) -> None:
        super().__init__("a")
        self.cursor_lookups = 0
        self.leaves: list[str] = []

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        if "__cursors" in request.streams:
            with self.lock:
                self.cursor_lookups += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: unavailable")
        return super().FetchMetadata(request, context)

    def JoinConsumerGroup(  # noqa: N802 - gRPC method name
        self, request: api_pb2.JoinConsumerGroupRequest, context: grpc.ServicerContext
    ) -> api_pb2.JoinConsumerGroupResponse:
        return api_pb2.JoinConsumerGroupResponse(
            coordinator=self.broker_id,
            epoch=1,
            consumerTimeout=15_000_000_000,
            coordinatorTimeout=15_000_000_000,
        )

    def FetchConsumerGroupAssignments(  # noqa: N802 - gRPC method name
        self,
        request: api_pb2.FetchConsumerGroupAssignmentsRequest,
        context: grpc.ServicerContext,
    ) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
        return api_pb2.FetchConsumerGroupAssignmentsResponse(
            epoch=1, assignments=[api_pb2.PartitionAssignment(stream="s", partitions=[0])]
        )

    def LeaveConsumerGroup(  # noqa: N802 - gRPC method name
        self, request: api_pb2.LeaveConsumerGroupRequest, context: grpc.ServicerContext
    ) -> api_pb2.LeaveConsumerGroupResponse:
        with self.lock:
            self.leaves.append(request.consumerId)
        return api_pb2.LeaveConsumerGroupResponse()


def test_close_ends_a_reader_retrying_its_cursor_partition_lookup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    broker = _NoCursorsMetadata()
    broker.start()
    try:
        options = ClientOptions(addresses=(broker.address,), retry=_SLOW, rpc_timeout=_RPC_TIMEOUT)
        with Client.from_options(options) as client:
            consumer = Consumer(client._core, "g", ["s"], auto_commit=None)
            consumer.join()
            assert consumer.wait_for_assignment(10) == {("s", 0)}
            # The reader's look-up failed once and sleeps its back-off (10 s).
            wait_until(lambda: broker.cursor_lookups >= 1, 10, "the cursor partition look-up")
            readers = [t for t in threading.enumerate() if t.name == "liftbridge-consumer-s-0"]
            started = time.monotonic()
            consumer.close()
            elapsed = time.monotonic() - started
            assert all(not t.is_alive() for t in readers), readers
            assert consumer.consumer_id in broker.leaves
    finally:
        broker.stop()
    assert "stuck in a call" not in caplog.text
    assert elapsed < 2.0  # not the reader's bound (2 × rpc_timeout + 1 = 11 s)
