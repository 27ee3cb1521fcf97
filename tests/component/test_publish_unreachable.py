"""Publishing to brokers that cannot be reached: a typed, prompt failure.

Publishes that no broker ever saw fail with ``BrokerUnavailableError`` naming the
addresses tried, once the retry policy is used up (seconds), not with
``AckTimeoutError`` at the ack timeout; those written to a broker and not answered
still wait for their ack.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, RetryPolicy
from liftbridge_sync.testing import FakeBroker
from tests.waiting import wait_until

#: A bound of about two seconds: refused connects use up the attempts first.
RETRY = RetryPolicy(max_attempts=6, max_delay=2.0, initial=0.05, maximum=0.2, jitter=0.0)


def _refusing_address() -> str:
    """An address nothing listens on (bound and released): connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A listener that accepts connections and never says anything."""
    yield from _listener(b"")


@pytest.fixture
def nats_like_listener() -> Iterator[str]:
    """A listener that greets every connection as a NATS server does (not HTTP/2)."""
    yield from _listener(b'INFO {"server_id":"fake","version":"2.10.0"}\r\n')


def _listener(greeting: bytes) -> Iterator[str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)
            if greeting:
                conn.sendall(greeting)

    thread = threading.Thread(target=accept, name="test-listener", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()
        for conn in accepted:
            conn.close()


@pytest.mark.parametrize("transport", ["h2", "grpc"])
@pytest.mark.parametrize("address", ["127.0.0.1:1", "refused"])
def test_publishes_to_an_unreachable_cluster_fail_as_unavailable_within_the_retry_bound(
    address: str, transport: str
) -> None:
    address = _refusing_address() if address == "refused" else address
    options = {"retry": RETRY, "publish_transport": transport, "rpc_timeout": 1.0}
    with Client([address], **options) as client:  # type: ignore[arg-type]
        started = time.monotonic()
        futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(3)]
        errors = [f.exception(timeout=20) for f in futures]
        elapsed = time.monotonic() - started
        with pytest.raises(lb.BrokerUnavailableError, match=address):
            client.publish("s", b"sync", partition=0)
    assert all(isinstance(e, lb.BrokerUnavailableError) for e in errors), errors
    assert not any(isinstance(e, lb.AckTimeoutError) for e in errors)
    assert address in str(errors[0])
    assert elapsed < 10.0  # the retry policy's bound, far below the 30 s ack timeout


def test_a_listener_that_never_answers_the_handshake_is_unavailable(
    silent_listener: str,
) -> None:
    with Client([silent_listener], retry=RETRY, rpc_timeout=1.0) as client:
        started = time.monotonic()
        with pytest.raises(lb.BrokerUnavailableError, match="no HTTP/2 handshake"):
            client.publish("s", b"x", partition=0)
        elapsed = time.monotonic() - started
    assert elapsed < 10.0


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_port_that_does_not_speak_http2_is_unavailable(
    nats_like_listener: str, transport: str
) -> None:
    # The h2 stream opened (bytes came back), then died on them, again and again: the
    # publish waited for its whole ack timeout and failed with AckTimeoutError, where
    # grpcio's channel said unavailable. A NATS port given by mistake is the usual case.
    options = {"retry": RETRY, "publish_transport": transport, "rpc_timeout": 1.0}
    with Client([nats_like_listener], **options) as client:  # type: ignore[arg-type]
        started = time.monotonic()
        with pytest.raises(lb.BrokerUnavailableError, match=nats_like_listener) as info:
            client.publish("s", b"x", partition=0)
        elapsed = time.monotonic() - started
    if transport == "h2":
        assert "does not speak HTTP/2" in str(info.value)
    assert elapsed < 10.0  # the retry policy's bound, far below the 30 s ack timeout


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_publishes_written_before_the_cluster_went_away_still_wait_for_their_ack(
    transport: str,
) -> None:
    # Written to a broker that took them and then vanished: they may be stored, so they
    # fail only at their own ack timeout (AckTimeoutError); a publish made after the
    # broker went away fails as unavailable, sooner.
    broker = FakeBroker().start()
    # The first publish is answered (with grpcio, only an answer proves a broker took
    # the stream), the next one never is.
    broker.publish_script = lambda request, n: "ack" if n == 1 else "drop"
    try:
        options = {"retry": RETRY, "publish_transport": transport, "rpc_timeout": 1.0}
        with Client([broker.address], **options) as client:  # type: ignore[arg-type]
            client.publish("s", b"answered", partition=0)
            written = client.publish_async("s", b"written", partition=0, timeout=6.0)
            wait_until(lambda: len(broker.received) == 2, what="the publish to arrive")
            broker.stop()
            broker = None  # type: ignore[assignment]
            publisher = client._publisher
            assert publisher is not None
            # Once the client saw the stream end, a new publish has nowhere to go.
            wait_until(lambda: publisher._table.live is None, what="the stream's end to be seen")
            later = client.publish_async("s", b"later", partition=0, timeout=30.0)
            assert isinstance(later.exception(timeout=20), lb.BrokerUnavailableError)
            assert not written.done()
            assert isinstance(written.exception(timeout=20), lb.AckTimeoutError)
    finally:
        if broker is not None:
            broker.stop()
