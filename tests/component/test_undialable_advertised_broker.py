"""A broker that advertises an address no one can dial is left out of the broker list.

The address came from the server, not from the user: it failed a publish with a
``ConfigurationError`` naming an address the user never gave, and gRPC cut a host at a
NUL and dialled the host before it.
"""

from __future__ import annotations

import logging

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker

_POLICY = lb.RetryPolicy(max_attempts=2, max_delay=0.5, initial=0.01, maximum=0.01, jitter=0)


class _Advertising(FakeBroker):
    """Advertises ``host`` for every broker in its metadata."""

    host = "127.0.0.1"

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        response = super().FetchMetadata(request, context)
        for broker in response.brokers:
            broker.host = self.host
        return response


@pytest.mark.parametrize("host", ["", "a b", "[::1]", "lb-0\x00.evil.example"])
def test_an_undialable_advertised_address_is_left_out_and_logged(
    host: str, caplog: pytest.LogCaptureFixture
) -> None:
    broker = _Advertising("a")
    broker.host = host
    with broker, caplog.at_level(logging.WARNING, logger="liftbridge_sync"):
        with lb.Client([broker.address], retry=_POLICY, rpc_timeout=2.0) as client:
            # Publishing goes to the brokers that can be dialled (here the seed).
            client.publish("s", b"x", timeout=2.0)
            # The leader is not dialled at what it advertised (nor at the part of it
            # before a NUL): no leader is known.
            with pytest.raises(lb.NotLeaderError):
                client.fetch_partition_metadata("s", 0)
            metadata = client.fetch_metadata()
            assert metadata.brokers == ()
            # With the metadata known, a new publish connection is not opened at what
            # the broker advertised either.
            client.publish("s", b"y", timeout=2.0)
    told = [r.getMessage() for r in caplog.records if "cannot be dialled" in r.getMessage()]
    assert told and "'a'" in told[0]
