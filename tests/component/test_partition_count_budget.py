"""A partitioner's count of a stream the cache does not know keeps to one retry policy:
the few quick asks for a stream just created each fetched its metadata under a policy of
their own, so a cluster going down after a few "no such stream" answers took those
asks (up to 1 s) and then a whole policy more."""

from __future__ import annotations

import time

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, RetryPolicy
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker

#: Only max_delay ends the retries.
_POLICY = RetryPolicy(max_attempts=1_000_000, max_delay=2.0, initial=0.05, maximum=0.2, jitter=0)
_RPC_TIMEOUT = 0.3


class _UnknownThenDown(FakeBroker):
    """Lists no stream for the first ``unknown`` FetchMetadata calls, then refuses them
    all (UNAVAILABLE): a stream not created yet, then a cluster going down."""

    unknown = 5

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        with self.lock:
            self.metadata_calls += 1
            calls = self.metadata_calls
        if calls > self.unknown:
            context.abort(grpc.StatusCode.UNAVAILABLE, "going down")
        broker = api_pb2.Broker(id=self.broker_id, host="127.0.0.1", port=self.port)
        return api_pb2.FetchMetadataResponse(brokers=[broker])


def test_a_count_of_an_unknown_stream_keeps_to_one_policy() -> None:
    with _UnknownThenDown("a") as broker:
        with Client([broker.address], retry=_POLICY, rpc_timeout=_RPC_TIMEOUT) as client:
            started = time.monotonic()
            with pytest.raises(lb.BrokerUnavailableError):
                client._core.partition_count("s")
            elapsed = time.monotonic() - started
        assert broker.metadata_calls > _UnknownThenDown.unknown  # asked while unknown, then refused
    # Before: five "no such stream" answers (0.75 s of back-off), then a policy of 2 s.
    assert elapsed < _POLICY.max_delay + _RPC_TIMEOUT
