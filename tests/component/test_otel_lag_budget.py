"""The consumer-lag gauge keeps to the time its metric reader gives a collection.

A fake broker whose ``FetchPartitionMetadata`` hangs: the lag is asked of the read
partition's leader, and the SDK holds its collection (every instrument of the provider)
until the callbacks return.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import MetricReader, MetricsData  # noqa: E402

from liftbridge_sync import Client, RetryPolicy, StartAt  # noqa: E402
from liftbridge_sync._proto import api_pb2  # noqa: E402
from liftbridge_sync.testing import FakeBroker  # noqa: E402
from liftbridge_sync.testing._fake import serve  # noqa: E402

#: Each RPC's timeout: what one unanswered FetchPartitionMetadata takes.
_RPC_TIMEOUT = 5.0
#: What the reader gives the collection (milliseconds).
_COLLECTION = 1500


class _HungLeader(FakeBroker):
    """Answers everything but ``FetchPartitionMetadata``, which never answers."""

    def FetchPartitionMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchPartitionMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchPartitionMetadataResponse:
        with self.lock:
            self.partition_metadata_calls += 1
        while context.is_active():  # until the client gives up (or the broker stops)
            time.sleep(0.02)
        context.abort(grpc.StatusCode.CANCELLED, "client gone")
        raise AssertionError("unreachable")


class _Reader(MetricReader):
    """Keeps the last collection; :meth:`collect` is given its timeout by the test."""

    def __init__(self) -> None:
        super().__init__()
        self.data: MetricsData | None = None

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        self.data = metrics_data

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with _HungLeader() as fake:
        fake.subscribe_scripts = [serve([0, 1], "hang")]
        yield fake


def test_the_lag_gauge_keeps_to_the_collection_timeout(broker: FakeBroker) -> None:
    # The lag callback asked the hung leader within the client's retry policy (one
    # rpc_timeout here, a policy's max_delay plus one by default), whatever the reader
    # gave the collection: a hung broker held every metric of the provider that long,
    # and the SDK then dropped the whole collection as timed out.
    reader = _Reader()
    provider = MeterProvider(metric_readers=[reader])
    client = Client(
        [broker.address],
        meter_provider=provider,
        rpc_timeout=_RPC_TIMEOUT,
        retry=RetryPolicy.no_retry(),
    )
    try:
        client.publish("s", b"x")  # the client reports from its first publish
        with client.subscribe("s", start=StartAt.earliest()) as sub:
            assert sub.get(10).offset == 0
            started = time.monotonic()
            reader.collect(timeout_millis=_COLLECTION)
            elapsed = time.monotonic() - started
    finally:
        client.close()
        provider.shutdown()
    assert broker.partition_metadata_calls >= 1  # the leader was asked, and hung
    assert elapsed < _COLLECTION / 1000, elapsed
    assert reader.data is not None
    names = {
        metric.name
        for resource in reader.data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert "messaging.liftbridge.publish.in_flight" in names
