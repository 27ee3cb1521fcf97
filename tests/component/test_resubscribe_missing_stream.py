"""A resubscribe whose fresh metadata keeps lacking the stream ends in
``StreamDeletedError``: a restarted server answers without its streams only until it has
recovered them, so an absence that outlasts ``resubscribe_wait`` is a deletion, not a
``BrokerUnavailableError`` of a partition "not served yet"."""

from __future__ import annotations

import threading

import grpc
import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.errors import StreamDeletedError
from liftbridge_sync.testing import FakeBroker, refuse, serve


class _Deleting(FakeBroker):
    """A broker whose metadata answers lack every stream once :attr:`deleted` is set."""

    def __init__(self) -> None:
        super().__init__("a")
        self.deleted = threading.Event()

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        response = super().FetchMetadata(request, context)
        if self.deleted.is_set():
            del response.streamMetadata[:]
        return response


def test_a_stream_missing_from_the_metadata_for_all_of_resubscribe_wait_is_deleted() -> None:
    broker = _Deleting()
    broker.start()
    try:
        broker.subscribe_scripts = [
            serve([0], ("UNAVAILABLE", "scripted: gone")),
            # As a server without the stream does, at every attempt.
            *(refuse("NOT_FOUND", "no such partition") for _ in range(100)),
        ]
        # resubscribe_wait well under the retry policy's max_delay (10 s): the absence
        # is judged by the end of resubscribe_wait, not only by max_delay.
        with Client([broker.address], subscribe_transport="grpc", resubscribe_wait=1.0) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert sub.get(5).offset == 0
            broker.deleted.set()
            with pytest.raises(StreamDeletedError) as caught:
                sub.get(10)
            assert caught.value.code == "NOT_FOUND"
    finally:
        broker.stop()
