"""``Client.close()`` ends a partitioner's wait for a stream the cache does not know at
once: the few asks for a stream just created slept their back-offs in a plain sleep, so
a publish placing a message outlived close() by up to a back-off, and then asked a
closed client once more."""

from __future__ import annotations

import logging

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, RetryPolicy
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport import partition_counts
from liftbridge_sync.testing import FakeBroker
from tests.closing import close_during_back_off

#: Long back-offs for the asks: a count is nearly always asleep between them.
_SETTLE = RetryPolicy(max_attempts=6, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0.0)
_POLICY = RetryPolicy(max_attempts=10, max_delay=60.0, initial=0.05, maximum=0.2, jitter=0.0)


class _NoStreams(FakeBroker):
    """Lists no stream: one not created yet, as far as every server knows."""

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        broker = api_pb2.Broker(id=self.broker_id, host="127.0.0.1", port=self.port)
        return api_pb2.FetchMetadataResponse(brokers=[broker])


def test_close_ends_a_partition_count_in_its_back_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partition_counts, "_SETTLE", _SETTLE)
    caplog.set_level(logging.WARNING, logger="liftbridge_sync.retry")
    with _NoStreams("a") as broker:
        client = Client([broker.address], retry=_POLICY, rpc_timeout=1.0)
        # The unknown stream's ask is logged just before its back-off starts.
        ended, errors, caller = close_during_back_off(
            client, lambda: client._core.partition_count("s"), "partition count: attempt 1", caplog
        )
    assert not caller.is_alive()
    assert ended < 2.0
    assert len(errors) == 1 and isinstance(errors[0], lb.ClientClosedError), errors
