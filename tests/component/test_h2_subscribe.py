"""The ``"h2"`` Subscribe reader (the default) on its own: flow control, frames spread or
bunched across reads, limits, cancel from another thread, TLS, and garbage from the wire.

The subscription-level faults (resubscribe offsets, timeouts, terminal errors) run on
both transports in test_subscribe_faults.py.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import h2.config
import h2.connection
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import liftbridge_sync as lb
from liftbridge_sync import ClientOptions, StartAt, StopAt
from liftbridge_sync._proto import api_pb2, api_pb2_grpc
from liftbridge_sync._transport import h2_subscribe
from liftbridge_sync._transport.h2 import framing, subscribe_receiver
from liftbridge_sync._transport.h2_subscribe import H2SubscribeCall
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    LiftbridgeError,
    NoSuchPartitionError,
    StreamDeletedError,
)
from liftbridge_sync.testing import FakeBroker, FakeCluster, generate_certificates, serve
from tests.waiting import wait_until

from .test_subscribe_faults import make_client


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker("a", FakeCluster(leader="a")).start()
    yield fake
    fake.stop()


def _request() -> api_pb2.SubscribeRequest:
    return api_pb2.SubscribeRequest(stream="s", partition=0)


def _big(offsets: range, size: int) -> object:
    """Like ``serve`` (then OK) but with ``size``-byte values."""

    def script(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        for offset in offsets:
            yield api_pb2.Message(offset=offset, value=bytes([offset % 251]) * size, stream="s")

    return script


def test_default_transport_is_h2() -> None:
    assert ClientOptions(addresses=("127.0.0.1:1",)).subscribe_transport == "h2"
    with pytest.raises(lb.ConfigurationError):
        ClientOptions(addresses=("127.0.0.1:1",), subscribe_transport="quic")


def test_small_windows_are_returned_by_our_window_updates(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DATA frames read on the fast path bypass h2: without our WINDOW_UPDATEs the broker
    # would stall after 64 KiB.
    monkeypatch.setattr(h2_subscribe, "_RECV_WINDOW", 65535)
    monkeypatch.setattr(subscribe_receiver, "_CREDIT_AT", 4096)
    broker.subscribe_scripts = [_big(range(2000), 1000)]  # type: ignore[list-item]
    with make_client(broker) as client:
        got = list(client.subscribe("s", start=StartAt.earliest()))
    assert [m.offset for m in got] == list(range(2000))
    assert all(m.value == bytes([m.offset % 251]) * 1000 for m in got)


def test_messages_larger_than_a_frame(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [_big(range(5), 200_000)]  # type: ignore[list-item]
    with make_client(broker) as client:
        got = list(client.subscribe("s", start=StartAt.earliest()))
    assert [len(m.value) for m in got] == [200_000] * 5


def test_message_over_the_limit_raises_instead_of_ending_quietly(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [_big(range(3), 5000)]  # type: ignore[list-item]
    options = {"grpc_options": (("grpc.max_receive_message_length", 4096),)}
    with make_client(broker, **options) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        with pytest.raises(lb.LiftbridgeError, match="larger than the limit"):
            next(sub)


def test_cancel_from_another_thread_ends_a_blocked_read(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [serve([0], "hang")]
    options = ClientOptions(addresses=(broker.address,))
    call = H2SubscribeCall(broker.address, _request(), options)
    assert next(call).offset == 0  # the handshake
    assert next(call).offset == 0
    errors: list[BaseException] = []

    def read() -> None:
        try:
            next(call)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    reader = threading.Thread(target=read, name="liftbridge-test-reader", daemon=True)
    reader.start()
    reader.join(0.2)
    call.cancel()
    reader.join(10)
    assert not reader.is_alive()
    assert isinstance(errors[0], LiftbridgeError) and errors[0].code == "CANCELLED"
    call.cancel()  # idempotent
    with pytest.raises(LiftbridgeError):
        next(call)


def test_cancel_before_the_first_read() -> None:
    options = ClientOptions(addresses=("127.0.0.1:1",))
    call = H2SubscribeCall("127.0.0.1:1", _request(), options)
    call.cancel()
    with pytest.raises(LiftbridgeError) as info:
        next(call)
    assert info.value.code == "CANCELLED"


def test_refused_connection_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    call = H2SubscribeCall(address, _request(), ClientOptions(addresses=(address,)))
    with pytest.raises(LiftbridgeError) as info:
        next(call)
    assert info.value.code == "UNAVAILABLE"


# ---------------------------------------------------------------- bytes from the wire


def _server_bytes(
    count: int, trailers: list[tuple[bytes, bytes]], *, handshake: bool = True
) -> bytes:
    """What a gRPC server sends for a Subscribe: handshake, ``count`` messages, trailers."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/x"),
                            (":authority", "a"), ("te", "trailers")])  # fmt: skip
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(b":status", b"200"), (b"content-type", b"application/grpc")])
    for offset in [0, *range(count)] if handshake else range(count):
        body = api_pb2.Message(offset=offset, value=b"v%d" % offset).SerializeToString()
        server.send_data(1, b"\0" + len(body).to_bytes(4, "big") + body)
    if trailers:  # none: the stream stays open
        server.send_headers(1, trailers, end_stream=True)
    return server.data_to_send()


class _RawServer:
    """Answers every connection with canned bytes (split into given chunks), then closes.

    Thread-safe enough for one client at a time.
    """

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.chunks: list[bytes] = []
        #: What each client connection sent, in the order they were accepted (the tail of
        #: one connection may arrive after the next test began: keep them apart).
        self.connections: list[bytearray] = []
        self.thread = threading.Thread(target=self._run, name="liftbridge-test-raw", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            received = bytearray()
            self.connections.append(received)
            with conn:
                try:
                    for chunk in self.chunks:
                        conn.sendall(chunk)
                    conn.shutdown(socket.SHUT_WR)
                    while data := conn.recv(65536):
                        received += data
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def raw() -> Iterator[_RawServer]:
    server = _RawServer()
    yield server
    server.close()


def _read_all(address: str) -> tuple[list[int], BaseException | None]:
    call = H2SubscribeCall(address, _request(), ClientOptions(addresses=(address,)))
    offsets: list[int] = []
    try:
        for message in call:
            offsets.append(message.offset)
    except LiftbridgeError as exc:
        return offsets, exc
    finally:
        call.cancel()
    return offsets, None


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_any_split_of_a_good_stream_reads_the_same(raw: _RawServer, cuts: list[int]) -> None:
    data = _server_bytes(50, [(b"grpc-status", b"0")])
    raw.chunks = _split(data, cuts)
    offsets, error = _read_all(raw.address)
    assert error is None
    assert offsets == [0, *range(50)]


def test_error_status_after_the_messages(raw: _RawServer) -> None:
    raw.chunks = [_server_bytes(3, [(b"grpc-status", b"14"), (b"grpc-message", b"gone%20away")])]
    offsets, error = _read_all(raw.address)
    assert offsets == [0, 0, 1, 2]  # every message before the status is delivered
    assert isinstance(error, BrokerUnavailableError)
    assert error.code == "UNAVAILABLE" and error.details == "gone away"


def test_an_error_before_any_message_is_a_refused_open_after_one_a_running_end(
    raw: _RawServer,
) -> None:
    # The transport types the error (one mapping, _wire.status): NOT_FOUND refuses an
    # open (no such partition) but ends a running subscription (the stream was deleted).
    raw.chunks = [
        _server_bytes(0, [(b"grpc-status", b"5"), (b"grpc-message", b"no")], handshake=False)
    ]
    offsets, error = _read_all(raw.address)
    assert offsets == []
    assert isinstance(error, NoSuchPartitionError) and error.code == "NOT_FOUND"
    raw.chunks = [_server_bytes(1, [(b"grpc-status", b"5"), (b"grpc-message", b"no")])]
    offsets, error = _read_all(raw.address)
    assert offsets == [0, 0]
    assert isinstance(error, StreamDeletedError) and error.code == "NOT_FOUND"


def test_data_beyond_our_window_ends_the_call_with_a_flow_control_error(
    raw: _RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker that ignores the window we gave (64 KiB here, none of it returned yet:
    # our WINDOW_UPDATEs go out every 256 KiB read) is refused as h2 would refuse it:
    # GOAWAY(FLOW_CONTROL_ERROR), and the call ends UNAVAILABLE (the subscription
    # resubscribes) after every message that arrived before the overrun.
    monkeypatch.setattr(h2_subscribe, "_RECV_WINDOW", 65535)
    head = _server_bytes(0, [], handshake=False)  # SETTINGS and the response headers
    body = api_pb2.Message(offset=7, value=b"v" * 995).SerializeToString()
    message = b"\0" + len(body).to_bytes(4, "big") + body
    frame = framing.data_frame_header(1, len(message)) + message
    count = 65_535 // len(message) + 1  # one frame past the window
    accepted = len(raw.connections)
    raw.chunks = [head + frame * count]
    offsets, error = _read_all(raw.address)
    assert offsets == [7] * count
    assert isinstance(error, BrokerUnavailableError) and error.code == "UNAVAILABLE"
    assert "beyond the flow-control window" in str(error)

    def goaway_codes() -> list[int]:
        [ours] = raw.connections[accepted:]  # this test's one connection
        sent = bytes(ours)[24:]  # after the client preface
        frames, _ = framing.split_frames(sent, 1 << 24)
        return [
            int.from_bytes(sent[s + 4 : s + 8], "big") for kind, _, _, s, _ in frames if kind == 7
        ]

    # The fake broker's thread records what it receives after our read has ended.
    wait_until(lambda: bool(goaway_codes()), what="our GOAWAY to reach the broker")
    assert goaway_codes() == [0x3]  # FLOW_CONTROL_ERROR


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cut=st.integers(min_value=0, max_value=2000),
    flips=st.lists(st.tuples(st.integers(min_value=0, max_value=2000), st.integers(0, 255))),
    junk=st.binary(max_size=64),
)
def test_truncated_or_garbled_streams_fail_cleanly(
    raw: _RawServer, cut: int, flips: list[tuple[int, int]], junk: bytes
) -> None:
    data = bytearray(_server_bytes(20, [(b"grpc-status", b"0")])[:cut])
    for index, value in flips:
        if index < len(data):
            data[index] = value
    raw.chunks = [bytes(data) + junk]
    offsets, error = _read_all(raw.address)
    # Either the stream happened to stay valid, or it ends with a typed gRPC error; the
    # messages delivered are always a prefix of what was sent (or garbled values of it).
    assert error is None or isinstance(error, LiftbridgeError)
    assert len(offsets) <= 21


# ---------------------------------------------------------------- TLS


def test_mutual_tls_with_alpn(tmp_path: Path) -> None:
    # The harness's CA: extensions as real CAs make them (strict X.509 on 3.13+).
    certs = generate_certificates(tmp_path, clients=["client"])
    client_cert, client_key = certs.client("client")
    files = {
        "ca.pem": certs.ca_cert.read_bytes(),
        "server.pem": certs.server_cert.read_bytes(),
        "server.key": certs.server_key.read_bytes(),
        "client.pem": client_cert.read_bytes(),
        "client.key": client_key.read_bytes(),
    }
    fake = FakeBroker("a", FakeCluster(leader="a"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_APIServicer_to_server(fake, server)
    credentials = grpc.ssl_server_credentials(
        [(files["server.key"], files["server.pem"])],
        root_certificates=files["ca.pem"],
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    fake.port = port
    fake.address = f"127.0.0.1:{port}"
    server.start()
    try:
        fake.subscribe_scripts = [serve(range(100), "end")]
        tls = lb.TLSOptions(
            ca_cert=files["ca.pem"],
            client_cert=files["client.pem"],
            client_key=files["client.key"],
            server_name="localhost",
        )
        with make_client(fake, tls=tls) as client:
            got = client.subscribe("s", start=StartAt.earliest(), stop=StopAt.offset(99))
            assert [m.offset for m in got] == list(range(100))
    finally:
        server.stop(grace=None).wait()


def test_a_cancel_that_closes_the_socket_under_a_send_is_a_cancel() -> None:
    # The race behind a get() timeout: cancel() closes the socket while the reading
    # thread writes a WINDOW_UPDATE. That must end the call as CANCELLED (the caller's
    # own timeout), not as an unavailable broker that sets off a resubscribe.
    call = H2SubscribeCall(
        "127.0.0.1:1", api_pb2.SubscribeRequest(stream="s"), ClientOptions(addresses=("x:1",))
    )
    left, right = socket.socketpair()
    right.close()
    call._sock = left
    call._outbuf += b"window update"
    call.cancel()  # not reading: closes the socket and forgets it
    call._sock = left  # ... after the writer had already picked it up
    call._send_out()
    assert isinstance(call._error, LiftbridgeError)
    assert call._error.code == "CANCELLED"


def test_a_get_0_polling_loop_resubscribes_once_after_a_lost_stream(
    broker: FakeBroker,
) -> None:
    # grpcio's reads take no deadline (a get() timeout cancels the call and the next
    # read resubscribes), so this is the h2 transport's alone.
    # The stream is lost after offset 2. Each get(0) that resubscribed cut the handshake
    # at once: the call was cancelled, its script used up, and the loop subscribed again
    # and again (here: silent calls after the second) without reading offsets 3-5.
    broker.subscribe_scripts = [
        serve([0, 1, 2], (grpc.StatusCode.UNAVAILABLE, "gone")),
        serve([3, 4, 5]),
    ]
    got: list[int] = []
    client = make_client(broker, subscribe_transport="h2")
    with client, client.subscribe("s", start=StartAt.earliest()) as sub:
        deadline = time.monotonic() + 10
        while len(got) < 6 and time.monotonic() < deadline:
            try:
                got.append(sub.get(0).offset)
            except TimeoutError:
                continue
        assert got == [0, 1, 2, 3, 4, 5]
        assert sub.stats().resubscribes == 1
    assert len(broker.subscribe_requests) == 2


def test_a_ping_after_the_brokers_goaway_is_a_closed_connection_not_a_protocol_error(
    raw: _RawServer,
) -> None:
    # gRPC's graceful shutdown (a broker stopping) is GOAWAY(NO_ERROR) covering every
    # stream, then a PING to time the in-flight streams (RFC 9113 §6.8 allows frames
    # after a GOAWAY). h2 closes its state machine on the GOAWAY and refuses the PING,
    # which surfaced as "HTTP/2 protocol error ... RECV_PING in state CLOSED".
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    head = server.data_to_send()  # SETTINGS (the response headers never come)
    goaway = framing.FRAME_HEADER.pack(8 << 8 | 7, 0, 0) + (0x7FFFFFFF).to_bytes(4, "big")
    goaway += (0).to_bytes(4, "big")
    ping = framing.FRAME_HEADER.pack(8 << 8 | 6, 0, 0) + b"graceful"
    # What a stopping grpcio server was seen to send after its first GOAWAY: a
    # WINDOW_UPDATE, a second GOAWAY (last stream 1, INTERNAL_ERROR), a PING.
    window = framing.window_update(0, 1000)
    last = framing.FRAME_HEADER.pack(8 << 8 | 7, 0, 0) + (1).to_bytes(4, "big")
    last += (2).to_bytes(4, "big")
    for chunks in (
        [head + goaway + ping],
        [head + goaway, ping],
        [head + goaway + window + last + ping],
    ):
        raw.chunks = chunks
        offsets, error = _read_all(raw.address)
        assert offsets == []
        assert isinstance(error, BrokerUnavailableError) and error.code == "UNAVAILABLE"
        assert "protocol error" not in str(error)
        assert "closed the connection" in str(error)
