"""``close()`` from another thread wakes a subscription's reader that is asking for
metadata on its way to resubscribe: the leader's look-up after a lost stream, a
partition the cache lacks, what a NOT_FOUND or a "segment has been closed" refusal
means. Each such call waited until its broker answered or ``rpc_timeout`` passed (once
per broker), so a whole-stream subscription's ``close()`` waited that long for its
reader thread, and a partition subscription's reader went on for that long after it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.models import FrozenMap, Metadata
from liftbridge_sync.testing import FakeBroker, refuse, serve
from tests.component.hanging_metadata import HangingMetadata
from tests.waiting import wait_until

T = TypeVar("T")

#: Far longer than the test waits for anything: a reader woken by it was not woken.
_RPC_TIMEOUT = 20.0
#: How long after close() the reader must have ended.
_PROMPTLY = 1.0


#: How the resubscribe comes to ask for metadata, after offset 0 was read: the broken
#: stream's script, the next Subscribe's, and whether the cache forgets the partition.
_WAYS: dict[str, tuple[Callable[..., Iterator[api_pb2.Message]], ...]] = {
    # A lost stream: the leader is suspect, the metadata refreshed.
    "lost": (serve([0], ("UNAVAILABLE", "going away")),),
    # Not asked for but quietly resubscribed at the cached leader, which the cache
    # no longer has: looked up.
    "uncached": (serve([0], ("CANCELLED", "cancelled")),),
    # Paused under the running read: the metadata says whether it is.
    "paused-running": (serve([0], ("FAILED_PRECONDITION", "commit log was closed")),),
    # Refused with NOT_FOUND: the metadata says whether the stream is gone.
    "not-found": (
        serve([0], ("CANCELLED", "cancelled")),
        refuse("NOT_FOUND", "no such partition"),
    ),
    # Refused as a paused partition's readers are: the metadata says whether it is.
    "paused": (
        serve([0], ("CANCELLED", "cancelled")),
        refuse("INTERNAL", "Failed to create stream reader: segment has been closed"),
    ),
}


def _subscribed(broker: HangingMetadata, client: Client, way: str, subscribe: Callable[[], T]) -> T:
    """``subscribe()``'s subscription, whose resubscribe after offset 0 asks for
    metadata ``way``, which hangs."""
    armed = threading.Event()
    first, *rest = _WAYS[way]
    broker.subscribe_scripts = [_after_handshake_wait_for(armed, first), *rest]
    sub = subscribe()
    broker.hang = True
    if way == "uncached":
        client._core.metadata.store(Metadata(brokers=(), streams=FrozenMap({})))
    # Only now may the first stream go on and break: a stream subscription's reader,
    # already running, would otherwise have asked for metadata before it could hang.
    armed.set()
    return sub


def _after_handshake_wait_for(
    armed: threading.Event, script: Callable[..., Iterator[api_pb2.Message]]
) -> Callable[..., Iterator[api_pb2.Message]]:
    """``script``, holding everything after its handshake until ``armed`` is set."""

    def gated(request: api_pb2.SubscribeRequest, context: object) -> Iterator[api_pb2.Message]:
        messages = script(request, context)
        yield next(messages)
        assert armed.wait(30), "the test never armed the hang"
        yield from messages

    return gated


def _client(broker: FakeBroker, transport: str = "grpc") -> Client:
    return Client(
        [broker.address],
        rpc_timeout=_RPC_TIMEOUT,
        resubscribe_wait=60.0,
        subscribe_transport=transport,
    )


@pytest.mark.parametrize("transport", ["h2", "grpc"])
@pytest.mark.parametrize("way", sorted(_WAYS))
def test_close_wakes_a_partition_reader_asking_for_metadata(way: str, transport: str) -> None:
    broker = HangingMetadata()
    broker.start()
    try:
        with _client(broker, transport) as client:
            sub = _subscribed(
                broker, client, way, lambda: client.subscribe("s", start=StartAt.earliest())
            )
            got: list[object] = []

            def read() -> None:
                try:
                    got.extend(sub)
                except BaseException as exc:  # noqa: BLE001 - what ended it is the question
                    got.append(exc)

            reader = threading.Thread(target=read, name="liftbridge-test-reader", daemon=True)
            reader.start()
            wait_until(lambda: broker.hung > 0, 10, "a metadata call hanging")
            closed = time.monotonic()
            sub.close()
            reader.join(_PROMPTLY + 5)
            ended = time.monotonic() - closed
            assert not reader.is_alive()
            assert ended < _PROMPTLY
            # Offset 0, then StopIteration: nothing raised, nothing lost.
            assert [getattr(m, "offset", m) for m in got] == [0]
    finally:
        broker.stop()


def test_close_of_a_stream_subscription_joins_a_reader_asking_for_metadata() -> None:
    broker = HangingMetadata()
    broker.start()
    try:
        with _client(broker) as client:
            sub = _subscribed(
                broker,
                client,
                "lost",
                lambda: client.subscribe_stream("s", start=StartAt.earliest()),
            )
            assert sub.get(10).offset == 0
            wait_until(lambda: broker.hung > 0, 10, "a metadata call hanging")
            closed = time.monotonic()
            sub.close()
            ended = time.monotonic() - closed
            assert ended < _PROMPTLY
            assert not [t for t in threading.enumerate() if t.name == "liftbridge-subscribe-s-0"]
    finally:
        broker.stop()
