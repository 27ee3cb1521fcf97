"""The reader threads of a whole-stream subscription dropped without ``close()`` are
joined: the ``liftbridge-timer`` thread closes it without waiting for them (timer
callbacks are short), and they were left to end by themselves, unjoined, so
``Client.close()`` returned with a reader still running."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import threading
from collections.abc import Iterator

import grpc
import pytest

from liftbridge_sync import Client, StartAt, StreamSubscription
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker, fake_message
from tests.waiting import wait_until


class _HoldLostStream(logging.Filter):
    """Holds the reader that logs "lost its stream" until :attr:`release` is set: a
    reader that takes its time to end (what it is doing then does not matter)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = threading.Event()
        self.release = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if "lost its stream" in record.getMessage():
            self.held.set()
            self.release.wait(30)
        return True


@dataclasses.dataclass
class _BusyReader:
    """A client whose whole-stream subscription (in :attr:`held`) read offset 0 and
    whose reader thread is now held busy ending, after its stream was lost."""

    client: Client
    held: list[StreamSubscription]
    reader: threading.Thread
    hold: _HoldLostStream


@contextlib.contextmanager
def _busy_reader() -> Iterator[_BusyReader]:
    lose = threading.Event()

    def script(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        yield fake_message(0)
        lose.wait(30)
        context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: gone")

    hold = _HoldLostStream()
    logger = logging.getLogger("liftbridge_sync.subscription")
    logger.addFilter(hold)
    broker = FakeBroker("a").start()
    broker.subscribe_scripts = [script]
    try:
        client = Client([broker.address])
        try:
            held = [client.subscribe_stream("s", start=StartAt.earliest())]
            assert held[0].get(5).offset == 0
            (reader,) = [t for t in threading.enumerate() if t.name == "liftbridge-subscribe-s-0"]
            lose.set()
            assert hold.held.wait(10)  # the reader is busy
            yield _BusyReader(client, held, reader, hold)
        finally:
            hold.release.set()
            client.close()
    finally:
        logger.removeFilter(hold)
        broker.stop()


def _client_close_waits_for_the_reader(busy: _BusyReader) -> None:
    closed = threading.Event()

    def close() -> None:
        busy.client.close()
        closed.set()

    closer = threading.Thread(target=close, name="test-closer", daemon=True)
    closer.start()
    # Client.close() waits for the reader (it returned at once).
    assert not closed.wait(0.5)
    busy.hold.release.set()
    assert closed.wait(10)
    assert not busy.reader.is_alive()


def test_the_readers_of_a_dropped_stream_subscription_are_joined_by_client_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with _busy_reader() as busy:
        with caplog.at_level(logging.WARNING, logger="liftbridge_sync.subscription"):
            busy.held.clear()  # dropped without close()
            gc.collect()
            wait_until(lambda: "dropped without close(): closing" in caplog.text, 10)
        _client_close_waits_for_the_reader(busy)


def test_readers_outliving_close_with_a_timeout_are_joined_by_client_close() -> None:
    # close(timeout) returned with a reader still running; the subscription, then
    # dropped, left the client's (weak) registry, and Client.close() did not join it.
    with _busy_reader() as busy:
        busy.held[0].close(0)
        assert busy.reader.is_alive()
        busy.held.clear()
        gc.collect()
        _client_close_waits_for_the_reader(busy)
