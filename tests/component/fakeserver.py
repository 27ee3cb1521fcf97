"""An in-process gRPC server that scripts faults the real server cannot produce on demand.

Only for fault injection (lost acks, UNAVAILABLE in the middle of a stream, not-leader
answers); every behaviour that the real server can show is tested against the real
server in tests/integration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from liftbridge_sync._proto import api_pb2, api_pb2_grpc

#: Decides what happens to one PublishAsync request: "ack", "drop" (never answer),
#: "abort" (end the stream with UNAVAILABLE), a PublishAsyncError code number, or
#: ("error_then_ack", code) to mimic the server's PERMISSION_DENIED quirk.
PublishScript = Callable[[api_pb2.PublishRequest, int], Any]


class FakeLiftbridge(api_pb2_grpc.APIServicer):
    """A scripted fake broker on 127.0.0.1:<random port>.

    Thread-safe (gRPC calls its methods from a thread pool).
    """

    def __init__(self, broker_id: str = "fake") -> None:
        self.broker_id = broker_id
        self.lock = threading.Lock()
        self.received: list[api_pb2.PublishRequest] = []
        self.streams_opened = 0
        self.publish_script: PublishScript = lambda req, n: "ack"
        self.partition_metadata_calls = 0
        self.not_leader_times = 0
        self.leader_id = broker_id
        self.peers: list[FakeLiftbridge] = []
        self._offsets: dict[tuple[str, int], int] = {}
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_APIServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> FakeLiftbridge:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None).wait()

    # -------------------------------------------------------------- metadata

    def _broker(self) -> api_pb2.Broker:
        return api_pb2.Broker(id=self.broker_id, host="127.0.0.1", port=self.port)

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        brokers = [self._broker()] + [peer._broker() for peer in self.peers]
        partitions = {
            p: api_pb2.PartitionMetadata(id=p, leader=self.leader_id, isr=[self.leader_id])
            for p in range(4)
        }
        names = list(request.streams) or ["s"]
        return api_pb2.FetchMetadataResponse(
            brokers=brokers,
            streamMetadata=[
                api_pb2.StreamMetadata(name=name, subject=name, partitions=partitions)
                for name in names
            ],
        )

    def FetchPartitionMetadata(  # noqa: N802
        self, request: api_pb2.FetchPartitionMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchPartitionMetadataResponse:
        with self.lock:
            self.partition_metadata_calls += 1
            refuse = self.not_leader_times > 0
            if refuse:
                self.not_leader_times -= 1
        if refuse:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "The request should be sent to partition leader",
            )
        return api_pb2.FetchPartitionMetadataResponse(
            metadata=api_pb2.PartitionMetadata(id=request.partition, leader=self.broker_id)
        )

    # -------------------------------------------------------------- publishing

    def PublishAsync(  # noqa: N802
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        with self.lock:
            self.streams_opened += 1
        for request in request_iterator:
            with self.lock:
                self.received.append(request)
                count = len(self.received)
            action = self.publish_script(request, count)
            if action == "drop" or (action == "ack" and request.ackPolicy == api_pb2.NONE):
                continue
            if action == "abort":
                context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: broker going away")
            code = action[1] if isinstance(action, tuple) else action
            if isinstance(code, int):
                yield api_pb2.PublishResponse(
                    correlationId=request.correlationId,
                    asyncError=api_pb2.PublishAsyncError(code=code, message="scripted"),  # type: ignore[arg-type]
                    ack=api_pb2.Ack(),
                )
                if not isinstance(action, tuple):
                    continue
            key = (request.stream, request.partition)
            with self.lock:
                offset = self._offsets.get(key, -1) + 1
                self._offsets[key] = offset
            yield api_pb2.PublishResponse(
                correlationId=request.correlationId,
                ack=api_pb2.Ack(
                    stream=request.stream,
                    offset=offset,
                    correlationId=request.correlationId,
                    ackPolicy=request.ackPolicy,
                ),
            )
