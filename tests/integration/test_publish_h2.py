"""The ``"h2"`` publish transport against the real Liftbridge server."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, Message, StartAt, StopAt

from .conftest import StreamFactory

pytestmark = pytest.mark.integration


def read_all(client: Client, stream: str) -> list[Message]:
    """Every message currently in partition 0, in order."""
    if client.fetch_partition_metadata(stream, 0).newest_offset < 0:
        return []
    with client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        return list(sub)


def _io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-publish-io"]


def test_keyed_messages_with_headers_read_back_in_order(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    with Client([liftbridge_address], publish_transport="h2") as client:
        futures = [
            client.publish_async(name, b"v%d" % i, key=b"k%d" % (i % 7), headers={"n": b"%d" % i})
            for i in range(300)
        ]
        acks = [f.result(timeout=30) for f in futures]
        assert _io_threads(), "the h2 transport was not used"
    assert [a.offset for a in acks if a is not None] == list(range(300))
    stored = read_all(liftbridge_client, name)
    assert [(m.key, m.value, m.headers["n"]) for m in stored] == [
        (b"k%d" % (i % 7), b"v%d" % i, b"%d" % i) for i in range(300)
    ]


def test_pipelined_publishes_from_four_threads_are_contiguous(
    liftbridge_client: Client, liftbridge_address: str, new_stream: StreamFactory
) -> None:
    name = new_stream()
    per_thread = 5000
    results: list[list[Future[lb.Ack | None]]] = [[] for _ in range(4)]
    with Client([liftbridge_address], publish_transport="h2", max_in_flight=2000) as client:

        def produce(index: int) -> None:
            results[index] = [
                client.publish_async(name, b"%d-%d" % (index, i), timeout=60)
                for i in range(per_thread)
            ]

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        acks = [f.result(timeout=60) for futures in results for f in futures]
    offsets = sorted(a.offset for a in acks if a is not None)
    assert offsets == list(range(4 * per_thread))
    # Each thread's messages keep their order in the partition.
    stored = read_all(liftbridge_client, name)
    for index in range(4):
        prefix = b"%d-" % index
        mine = [m.value for m in stored if m.value.startswith(prefix)]
        assert mine == [b"%d-%d" % (index, i) for i in range(per_thread)]


@pytest.mark.parametrize(
    "extra", [{}, {"key": b"k", "headers": {"h": b"v"}}], ids=["plain value", "key and headers"]
)
def test_publish_reads_its_own_ack_from_the_real_broker(
    liftbridge_client: Client,
    liftbridge_address: str,
    new_stream: StreamFactory,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, object],
) -> None:
    # publish() takes the socket from the I/O thread while it waits: the broker's
    # flow-control PING and then the ack are read, and the ack handed over, on the
    # caller's own thread.
    from liftbridge_sync._transport.h2 import connection

    handed_over_on: list[str] = []
    real = connection.H2PublishStream._hand_over

    def spy(
        self: connection.H2PublishStream, responses: list[object], on_io_thread: bool = True
    ) -> None:
        handed_over_on.append(threading.current_thread().name)
        real(self, responses, on_io_thread)  # type: ignore[arg-type]

    monkeypatch.setattr(connection.H2PublishStream, "_hand_over", spy)
    name = new_stream()
    with Client([liftbridge_address]) as client:
        acks = [client.publish(name, b"m%d" % i, **extra) for i in range(200)]  # type: ignore[arg-type]
    assert [a.offset for a in acks if a is not None] == list(range(200))
    assert handed_over_on.count(threading.current_thread().name) >= 150, handed_over_on
    assert [m.value for m in read_all(liftbridge_client, name)] == [b"m%d" % i for i in range(200)]


def test_threads_calling_publish_on_one_client_each_get_their_own_ack(
    liftbridge_client: Client,
    liftbridge_address: str,
    new_stream: StreamFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Many threads blocked in publish() on one client (a web server's handlers): each
    # waits on a lock of its own, the acks of several wake several at once, and the
    # first of those to publish again leave their requests for the last one to write
    # (combining). Each call must still return its own message's ack.
    from liftbridge_sync._transport.h2 import writing

    combined = [0]
    real_take = writing.Writer.take_queue

    def take_queue(self: writing.Writer, on_io_thread: bool = True) -> None:
        combined[0] += self._out.deferred  # requests some caller left to be written for it
        real_take(self, on_io_thread)

    monkeypatch.setattr(writing.Writer, "take_queue", take_queue)
    name = new_stream()
    threads, per_thread = 16, 60
    acks: dict[bytes, lb.Ack | None] = {}
    with Client([liftbridge_address], ack_timeout=60) as client:

        def produce(index: int) -> None:
            for i in range(per_thread):
                value = b"%d-%d" % (index, i)
                acks[value] = client.publish(name, value)

        workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
        assert not any(worker.is_alive() for worker in workers)
    assert len(acks) == threads * per_thread
    stored = {m.offset: m.value for m in read_all(liftbridge_client, name)}
    assert len(stored) == threads * per_thread
    for value, ack in acks.items():
        assert ack is not None and ack.stream == name
        assert stored[ack.offset] == value, "a caller got another caller's ack"
    assert len({ack.correlation_id for ack in acks.values() if ack is not None}) == len(acks)
    assert combined[0] > 0, "no caller left its request to another (combining never ran)"
