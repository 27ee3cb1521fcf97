"""Put test data into streams through the raw ``PublishAsync`` stub.

Independent of the client's publisher so that subscription tests do not depend on it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from liftbridge_sync._proto import api_pb2, api_pb2_grpc

_ids = itertools.count()


@dataclass(frozen=True)
class Record:
    """One message to publish."""

    value: bytes
    key: bytes = b""
    headers: Mapping[str, bytes] = field(default_factory=dict)


def publish(
    address: str,
    stream: str,
    values: Sequence[bytes | Record],
    *,
    partition: int = 0,
    ack_policy: int = api_pb2.LEADER,
    timeout: float = 20.0,
) -> list[int]:
    """Publish ``values`` in order on one PublishAsync stream and wait for every ack.

    Args:
        address: Any broker, ``host:port``.
        stream: Stream name.
        values: Payloads, or :class:`Record` for keys and headers.
        partition: Target partition.
        ack_policy: ``api_pb2.LEADER`` or ``api_pb2.ALL``.
        timeout: Deadline of the whole stream, seconds.

    Returns:
        The offsets the messages were written at, in order.
    """
    records = [v if isinstance(v, Record) else Record(v) for v in values]
    ids = [f"pubdata-{next(_ids)}" for _ in records]
    acked = threading.Event()

    def requests() -> Iterator[api_pb2.PublishRequest]:
        for cid, record in zip(ids, records, strict=True):
            yield api_pb2.PublishRequest(
                stream=stream,
                partition=partition,
                key=record.key,
                value=record.value,
                headers=dict(record.headers),
                correlationId=cid,
                ackPolicy=ack_policy,  # type: ignore[arg-type]
                expectedOffset=-1,
            )
        # Half-closing the request stream makes the server end the call, dropping acks
        # still on their way: keep it open until every ack is in.
        acked.wait(timeout)

    offsets: dict[str, int] = {}
    with grpc.insecure_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)  # type: ignore[no-untyped-call]
        call = stub.PublishAsync(requests(), timeout=timeout)
        try:
            for response in call:
                assert not response.HasField("asyncError"), response.asyncError
                assert response.ack.ackError == 0, response.ack
                offsets[response.correlationId] = response.ack.offset
                if len(offsets) == len(ids):
                    break
        finally:
            acked.set()
            call.cancel()
    assert len(offsets) == len(ids), f"only {len(offsets)} of {len(ids)} acks arrived"
    return [offsets[cid] for cid in ids]


def publish_values(
    address: str, stream: str, count: int, *, start: int = 0, partition: int = 0, **kwargs: int
) -> list[int]:
    """Publish ``b"m<i>"`` for ``i`` in ``start..start+count-1``; returns the offsets."""
    values = [f"m{i}".encode() for i in range(start, start + count)]
    return publish(address, stream, values, partition=partition, **kwargs)  # type: ignore[arg-type]
