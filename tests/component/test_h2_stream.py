"""The ``"h2"`` publish transport against the in-process fake broker (a real gRPC server)."""

from __future__ import annotations

import gc
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client
from liftbridge_sync._proto import api_pb2, api_pb2_grpc
from liftbridge_sync._transport.publish_stream import (
    StreamClosed,
    StreamEvent,
    StreamResponse,
    StreamResponses,
)
from liftbridge_sync.testing import FakeBroker, FakeCluster, generate_certificates
from tests.constants import FAST_RETRY
from tests.waiting import wait_until


def _fake_broker() -> FakeBroker:
    """A fake broker whose metadata lists every stream asked for, with four partitions."""
    return FakeBroker(cluster=FakeCluster(leader="fake", partitions=4))


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with _fake_broker() as server:
        yield server


def _client(address: str | list[str], **options: object) -> Client:
    addresses = [address] if isinstance(address, str) else address
    return Client(addresses, retry=FAST_RETRY, publish_transport="h2", **options)  # type: ignore[arg-type]


def free_port() -> int:
    """A port nothing listens on (bound and released): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-publish-io"]


def test_acks_arrive_with_offsets(fake: FakeBroker) -> None:
    with _client(fake.address) as client:
        first = client.publish("s", b"a", key=b"k", headers={"h": b"v"})
        second = client.publish("s", b"b")
        assert _io_threads(), "the h2 transport was not used"
    assert first is not None and second is not None
    assert (first.offset, second.offset) == (0, 1)
    assert fake.received[0].key == b"k" and fake.received[0].headers["h"] == b"v"


def test_pipelined_publishes_resolve_in_order(fake: FakeBroker) -> None:
    # No re-sends: the fake broker's log does not move as it acks (its newest offset
    # stays -1), so on a loaded machine, where it answers a thousand publishes in flight
    # slower than resend_after, the partition looked silent with an idle leader and a
    # few hundred were sent twice, out of order.
    with _client(fake.address, max_in_flight=1000, resend_after=None) as client:
        pending = [client.publish_async("s", b"m%d" % i, timeout=30) for i in range(5000)]
        offsets = [f.result(timeout=30).offset for f in pending]  # type: ignore[union-attr]
    assert offsets == list(range(5000))
    assert [r.value for r in fake.received] == [b"m%d" % i for i in range(5000)]


def test_small_receive_window_is_refilled(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Acks read on the fast path bypass h2: our own WINDOW_UPDATEs must keep the broker
    # sending once far more than one window's worth of acks has arrived.
    import liftbridge_sync._transport.h2.connection as h2stream
    import liftbridge_sync._transport.h2.responses as h2responses

    monkeypatch.setattr(h2stream, "_RECV_WINDOW", 65535)
    monkeypatch.setattr(h2responses, "_CREDIT_AT", 4096)
    with _client(fake.address, max_in_flight=500) as client:
        pending = [client.publish_async("s", b"m%d" % i, timeout=30) for i in range(3000)]
        offsets = [f.result(timeout=30).offset for f in pending]  # type: ignore[union-attr]
    assert offsets == list(range(3000))


def test_unavailable_as_first_answer_is_retried(fake: FakeBroker) -> None:
    # Nothing was sent on the first stream before UNAVAILABLE: a trailers-only answer.
    calls: list[int] = []

    def script(req: api_pb2.PublishRequest, n: int) -> object:
        calls.append(n)
        return "abort" if n == 1 else "ack"

    fake.publish_script = script
    with _client(fake.address) as client:
        assert client.publish("s", b"x", timeout=10) is not None
    assert fake.streams_opened == 2


def test_refused_connection_skips_to_next_broker(
    fake: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with _client([f"127.0.0.1:{free_port()}", fake.address]) as client:
        ack = client.publish("s", b"x", timeout=10)
    assert ack is not None and ack.offset == 0
    assert "cannot connect" in caplog.text  # the refused seed was tried first


def test_close_fails_leftovers_and_joins_io_thread(fake: FakeBroker) -> None:
    fake.publish_script = lambda req, n: "drop"
    client = _client(fake.address)
    future = client.publish_async("s", b"never-acked", timeout=60)
    deadline = time.monotonic() + 5
    while not fake.received and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _io_threads()
    client.close(timeout=0.2)
    with pytest.raises(lb.ClientClosedError):
        future.result(timeout=1)
    assert not _io_threads()


def test_a_finished_stream_is_freed_without_the_cycle_collector(fake: FakeBroker) -> None:
    # The stream composes a writer and a caller-reads part that call back into it; once
    # its I/O thread has finished it must be freed by reference counting as a stream
    # with no such parts was, not linger (with its buffers) until the collector runs.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        client = _client(fake.address)
        client.publish("s", b"a")
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        assert stream is not None
        freed = weakref.ref(stream)
        io_thread = stream._thread  # type: ignore[attr-defined]
        del stream, publisher
        client.close()
        io_thread.join(10)
        assert not io_thread.is_alive()
        del client
        assert freed() is None, "the finished stream is held by a reference cycle"
    finally:
        if was_enabled:
            gc.enable()


def test_acks_are_read_when_fewer_arrive_than_are_due(fake: FakeBroker) -> None:
    # Every other publish is never answered, so the acks that do come stay below the
    # bytes the I/O thread waits for (all forty acks due): only its bounded wait
    # (ack_read_delay) reads them, long before their 60 s ack timeout.
    fake.publish_script = lambda req, n: "drop" if req.value.endswith(b"odd") else "ack"
    client = _client(fake.address, ack_read_delay=0.3, ack_timeout=60.0)
    try:
        client.publish("s", b"first")  # one ack read: its size is known
        futures_ = [
            client.publish_async("s", b"m%d-%s" % (i, b"odd" if i % 2 else b"even"))
            for i in range(40)
        ]
        answered = futures_[0::2]
        done, _ = futures.wait(answered, timeout=20)
        assert len(done) == 20
        assert [f.result().offset for f in answered] == list(range(1, 21))  # type: ignore[union-attr]
        assert not any(f.done() for f in futures_[1::2])
    finally:
        client.close(timeout=0.2)


def test_publish_is_not_held_back_by_gathered_acks(fake: FakeBroker) -> None:
    # Fifty acks that never come are due, and the I/O thread may wait a minute for
    # them: a publish() caller must still get its own ack at once (no gathering while
    # somebody waits for an ack), well inside its 10 s timeout.
    fake.publish_script = lambda req, n: "drop" if req.value.startswith(b"lost") else "ack"
    client = _client(fake.address, ack_read_delay=60.0, ack_timeout=120.0)
    try:
        client.publish("s", b"first")
        lost = [client.publish_async("s", b"lost%d" % i) for i in range(50)]
        wait_until(lambda: len(fake.received) == 51, what="the lost publishes to arrive")
        for i in range(3):
            ack = client.publish("s", b"mine%d" % i, timeout=10.0)
            assert ack is not None and ack.offset == 1 + i  # the fake counts acked ones
        assert not any(f.done() for f in lost)
    finally:
        client.close(timeout=0.2)


@pytest.mark.parametrize("size", [1 << 20, 3 << 20])
def test_large_messages_arrive_intact(fake: FakeBroker, size: int) -> None:
    # Far larger than the 64 KiB initial windows and 16 KiB frames: split and
    # flow-controlled.
    payloads = [bytes([i]) * size for i in range(3)]
    with _client(fake.address) as client:
        pending = [client.publish_async("s", p, timeout=30) for p in payloads]
        offsets = [f.result(timeout=30).offset for f in pending]  # type: ignore[union-attr]
    assert offsets == [0, 1, 2]
    assert [r.value for r in fake.received] == payloads


class _Unimplemented(grpc.GenericRpcHandler):
    """Knows FetchMetadata (from the fake) but no PublishAsync: trailers-only UNIMPLEMENTED."""

    def __init__(self, fake: FakeBroker) -> None:
        self._fetch = grpc.unary_unary_rpc_method_handler(
            fake.FetchMetadata,
            request_deserializer=api_pb2.FetchMetadataRequest.FromString,
            response_serializer=api_pb2.FetchMetadataResponse.SerializeToString,
        )

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        if handler_call_details.method == "/proto.API/FetchMetadata":  # type: ignore[attr-defined]
            return self._fetch
        return None


def test_unimplemented_is_a_typed_permanent_error(fake: FakeBroker) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((_Unimplemented(fake),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with _client(f"127.0.0.1:{port}") as client:
            future = client.publish_async("s", b"x", timeout=10)
            with pytest.raises(lb.UnsupportedError) as info:
                future.result(timeout=10)
        assert not info.value.retryable
    finally:
        server.stop(grace=None).wait()


# ---------------------------------------------------------------- the stream on its own


def _open(address: str) -> tuple[object, list[StreamEvent], threading.Event]:
    from liftbridge_sync._transport.h2.dial import open_h2_stream

    events: list[StreamEvent] = []
    closed = threading.Event()

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        if isinstance(event, StreamClosed):
            closed.set()

    client = _client(address)
    try:
        stream = open_h2_stream(client._core, address, 7, on_event)  # noqa: SLF001
    finally:
        client.close()
    return stream, events, closed


def _request(i: int) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(stream="s", value=b"v%d" % i, correlationId=str(i))


def test_half_close_ends_cleanly_after_the_acks(fake: FakeBroker) -> None:
    stream, events, closed = _open(fake.address)
    send: Callable[..., None] = stream.send  # type: ignore[attr-defined]
    for i in range(100):
        send(_request(i))
    stream.close()  # type: ignore[attr-defined]
    assert closed.wait(10)
    stream.join(5)  # type: ignore[attr-defined]
    # Acks read together arrive as one StreamResponses event.
    responses = [
        r.correlation_id
        for e in events
        for r in (
            [e.response]
            if isinstance(e, StreamResponse)
            else e.responses
            if isinstance(e, StreamResponses)
            else []
        )
    ]
    assert responses == [str(i) for i in range(100)]
    assert events[-1] == StreamClosed(7, None)
    assert sum(isinstance(e, StreamClosed) for e in events) == 1


def test_cancel_closes_exactly_once(fake: FakeBroker) -> None:
    fake.publish_script = lambda req, n: "drop"
    stream, events, closed = _open(fake.address)
    stream.send(_request(1))  # type: ignore[attr-defined]
    stream.cancel()  # type: ignore[attr-defined]
    assert closed.wait(5)
    stream.join(5)  # type: ignore[attr-defined]
    stream.cancel()  # type: ignore[attr-defined]
    stream.close()  # type: ignore[attr-defined]
    stream.send(_request(2))  # type: ignore[attr-defined] # dropped, no error
    closes = [e for e in events if isinstance(e, StreamClosed)]
    assert len(closes) == 1 and closes[0].error is not None


def test_broker_going_away_is_retryable(fake: FakeBroker) -> None:
    fake.publish_script = lambda req, n: "drop"
    stream, events, closed = _open(fake.address)
    stream.send(_request(1))  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while not fake.received and time.monotonic() < deadline:
        time.sleep(0.01)
    fake.__exit__(None, None, None)
    assert closed.wait(10)
    stream.join(5)  # type: ignore[attr-defined]
    error = events[-1].error  # type: ignore[union-attr]
    assert isinstance(error, lb.BrokerUnavailableError) and error.retryable


def test_connect_refused_raises_broker_unavailable() -> None:
    from liftbridge_sync._transport.h2.dial import open_h2_stream

    address = f"127.0.0.1:{free_port()}"
    client = _client(address)
    try:
        with pytest.raises(lb.BrokerUnavailableError):
            open_h2_stream(client._core, address, 1, lambda event: None)  # noqa: SLF001
    finally:
        client.close()


# ---------------------------------------------------------------- TLS


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, bytes]:
    """The harness's throw-away CA with a server (localhost, 127.0.0.1) and a client
    certificate: extensions as real CAs make them, so strict X.509 (3.13+) accepts them."""
    certs = generate_certificates(tmp_path, clients=["client"])
    cert, key = certs.client("client")
    paths = {
        "ca.pem": certs.ca_cert,
        "server.pem": certs.server_cert,
        "server.key": certs.server_key,
        "client.pem": cert,
        "client.key": key,
    }
    return {name: path.read_bytes() for name, path in paths.items()}


def test_mutual_tls_with_alpn(tls_files: dict[str, bytes]) -> None:
    fake = _fake_broker()  # its plaintext port is never started; serve it over TLS instead
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_APIServicer_to_server(fake, server)
    credentials = grpc.ssl_server_credentials(
        [(tls_files["server.key"], tls_files["server.pem"])],
        root_certificates=tls_files["ca.pem"],
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    fake.port = port
    server.start()
    tls = lb.TLSOptions(
        ca_cert=tls_files["ca.pem"],
        client_cert=tls_files["client.pem"],
        client_key=tls_files["client.key"],
        server_name="localhost",
    )
    try:
        with _client(f"127.0.0.1:{port}", tls=tls) as client:
            pending = [client.publish_async("s", b"t%d" % i, timeout=10) for i in range(200)]
            offsets = [f.result(timeout=10).offset for f in pending]  # type: ignore[union-attr]
            big = client.publish("s", b"B" * (1 << 20), timeout=10)
        assert offsets == list(range(200)) and big is not None
        assert fake.received[-1].value == b"B" * (1 << 20)
    finally:
        server.stop(grace=None).wait()
