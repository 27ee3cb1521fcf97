"""``close()`` from another thread ends a consumer's first ``join()`` promptly: the join,
made on the user's thread, went on retrying a broker that did not answer for as long
as the retry policy allowed (up to ``max_delay``, 10 s by default; each attempt up to
``rpc_timeout``), and only then did ``join()`` return."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from liftbridge_sync import Client
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.consumer import Consumer
from liftbridge_sync.errors import ClientClosedError
from liftbridge_sync.testing import FakeBroker
from tests.waiting import wait_until


class _HungGroups(FakeBroker):
    """A broker whose JoinConsumerGroup answers hang until cancelled (the fault: a
    coordinator that takes the join and never answers); its leaves are recorded."""

    def __init__(self) -> None:
        super().__init__("a")
        self.joins = 0
        self.leaves: list[str] = []
        self._never = threading.Event()

    def JoinConsumerGroup(  # noqa: N802 - gRPC method name
        self, request: api_pb2.JoinConsumerGroupRequest, context: grpc.ServicerContext
    ) -> api_pb2.JoinConsumerGroupResponse:
        with self.lock:
            self.joins += 1
        while context.is_active() and not self._never.wait(0.02):
            pass
        context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: never answered")
        raise AssertionError("unreachable")  # context.abort raises

    def LeaveConsumerGroup(  # noqa: N802 - gRPC method name
        self, request: api_pb2.LeaveConsumerGroupRequest, context: grpc.ServicerContext
    ) -> api_pb2.LeaveConsumerGroupResponse:
        with self.lock:
            self.leaves.append(request.consumerId)
        return api_pb2.LeaveConsumerGroupResponse()


def test_close_from_another_thread_ends_the_first_join_promptly() -> None:
    broker = _HungGroups()
    broker.start()
    try:
        with Client([broker.address], rpc_timeout=30.0) as client:
            consumer = Consumer(client._core, "g", ["s"], auto_commit=None)

            def close_once_joining() -> None:
                wait_until(lambda: broker.joins >= 1, 10)
                consumer.close()

            closer = threading.Thread(target=close_once_joining, name="test-closer")
            closer.start()
            started = time.monotonic()
            with pytest.raises(ClientClosedError):
                consumer.join()
            elapsed = time.monotonic() - started
            closer.join(10)
            assert not closer.is_alive()
            # The join abandoned in flight may have been applied: it is left again.
            wait_until(lambda: consumer.consumer_id in broker.leaves, 10)
            assert consumer.closed
    finally:
        broker.stop()
    assert elapsed < 5.0  # not the attempt's rpc_timeout (30 s)
