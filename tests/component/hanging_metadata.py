"""A fake broker whose metadata answers hang on demand, for the tests of what waits for
them (a subscription's resubscribe, its close)."""

from __future__ import annotations

import threading

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker, FakeCluster


class HangingMetadata(FakeBroker):
    """A broker whose FetchMetadata answers hang (until cancelled, or :attr:`released`
    is set) once :attr:`hang` is set; :attr:`hung` counts those that began to.

    Thread-safe as :class:`FakeBroker`.
    """

    def __init__(self, broker_id: str = "a", cluster: FakeCluster | None = None) -> None:
        super().__init__(broker_id, cluster)
        self.hang = False
        self.hung = 0
        self.released = threading.Event()

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        if self.hang:
            with self.lock:
                self.hung += 1
            # The fake server's side: it polls as serve()'s "hang" does.
            while context.is_active() and not self.released.wait(0.02):
                pass
        return super().FetchMetadata(request, context)

    def stop(self) -> None:
        """Release the hanging answers, then stop (see :meth:`FakeBroker.stop`)."""
        self.released.set()
        super().stop()
