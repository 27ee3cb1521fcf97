"""Subscriptions of one client resubscribing while a restarted server recovers.

A restarted server answers NOT_FOUND and metadata without its streams until it has
recovered them. A resubscribe that dropped the stream from the client's shared metadata
cache on such an answer made the next subscription's look take the stream for one this
client had deleted itself, and end at once with ``StreamDeletedError`` (seen in CI: two
of three partitions' subscribers of a rolling-restart test). Each subscription must
keep retrying through the recovery and read on from where it was.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc

from liftbridge_sync import Client, RetryPolicy, StartAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker, FakeCluster, refuse, serve

#: How long the broker recovers after it cut the subscriptions off.
RECOVERY = 1.5
PARTITIONS = 3


class _Restarting(FakeBroker):
    """Serves offset 0 of each partition and cuts its subscription off; from the first
    cut on, answers as a server recovering its streams for ``RECOVERY`` seconds; then
    serves offset 1."""

    def __init__(self) -> None:
        super().__init__("a", FakeCluster(leader="a", partitions=PARTITIONS))
        self.recovered_at: float | None = None
        self._served: set[int] = set()

    def _recovering(self) -> bool:
        return self.recovered_at is not None and time.monotonic() < self.recovered_at

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        response = super().FetchMetadata(request, context)
        if self._recovering():
            del response.streamMetadata[:]
        return response

    def Subscribe(  # noqa: N802 - gRPC method name
        self, request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        with self.lock:
            self.subscribe_requests.append(request)
            first = request.partition not in self._served
            self._served.add(request.partition)
            if first and self.recovered_at is None:
                self.recovered_at = time.monotonic() + RECOVERY
        if first:
            yield from serve([0], ("UNAVAILABLE", "scripted: restarting"))(request, context)
            return
        if self._recovering():
            yield from refuse("NOT_FOUND", "no such partition")(request, context)
            return
        yield from serve([1])(request, context)


def test_subscriptions_of_one_client_read_on_through_a_servers_recovery() -> None:
    broker = _Restarting()
    broker.start()
    try:
        with Client(
            [broker.address],
            subscribe_transport="grpc",
            retry=RetryPolicy(max_delay=5.0),
            resubscribe_wait=15.0,
        ) as client:
            subs = [
                client.subscribe("s", partition=p, start=StartAt.earliest())
                for p in range(PARTITIONS)
            ]
            assert [sub.get(5).offset for sub in subs] == [0] * PARTITIONS
            outcomes: dict[int, object] = {}

            def read_on(partition: int) -> None:
                try:
                    outcomes[partition] = subs[partition].get(12).offset
                except Exception as exc:  # noqa: BLE001 - the outcome under test
                    outcomes[partition] = exc

            readers = [
                threading.Thread(target=read_on, args=(p,), name=f"reader-{p}")
                for p in range(PARTITIONS)
            ]
            for reader in readers:
                reader.start()
            # Meanwhile the client's other users refresh its metadata in full (a
            # publisher, an admin call), from the server recovering: its answer, with no
            # streams, replaces the cache.
            while broker.recovered_at is None or time.monotonic() < broker.recovered_at:
                client.fetch_metadata()
                time.sleep(0.05)  # the pace of a steady caller, not a synchronisation
            for reader in readers:
                reader.join(15)
            assert outcomes == dict.fromkeys(range(PARTITIONS), 1), outcomes
            for sub in subs:
                sub.close()
    finally:
        broker.stop()
