"""A subscription's ``close()`` and ``get(timeout)`` abandon the ``"h2"`` dial at once.

The subscribe reader's dial could only be asked to stop while its TCP connect waited (a
flag polled every 50 ms): the TLS pre-flight, the TLS handshake and the wait for the
broker's first frame went on until ``rpc_timeout`` (the pre-flight: 5 s at most) against
a broker that accepts connections and then says nothing. Now the call's dial is
abandoned as the publisher's is (a :class:`~liftbridge_sync._transport.aborting.DialAbort`
shuts the socket of the step under way down), so with ``rpc_timeout=30`` close()
returns, and ``get(timeout)`` times out, within a second or so.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import ClientOptions, StartAt, TLSOptions
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport import channels as channels_module
from liftbridge_sync._transport.aborting import connect
from liftbridge_sync._transport.channels import ChannelPool
from liftbridge_sync._transport.h2 import dial as dial_module
from liftbridge_sync._transport.h2_subscribe import H2SubscribeCall
from liftbridge_sync.testing import (
    FakeBroker,
    FakeCluster,
    TestCertificates,
    generate_certificates,
    serve,
)
from tests.silent_listener import SilentListener
from tests.stacks import frame_of, stack_of, thread_in
from tests.waiting import wait_until

from .test_subscribe_faults import SC, make_client

#: What a bound may be exceeded by on a loaded 2-core machine (scheduling, not waits).
BOUND = 2.0


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"))


def _tls(certs: TestCertificates) -> TLSOptions:
    return TLSOptions(ca_cert=str(certs.ca_cert), server_name="localhost")


def _innermost(thread: threading.Thread) -> str | None:
    """The name of the function ``thread`` runs Python code of now (innermost frame)."""
    frame = frame_of(thread.ident)
    return None if frame is None else frame.f_code.co_name


def _call_checking_tls(address: str, options: ClientOptions, pool: ChannelPool) -> H2SubscribeCall:
    """A Subscribe call to ``address`` whose first read runs ``pool``'s TLS pre-flight."""
    return H2SubscribeCall(
        address,
        api_pb2.SubscribeRequest(stream="s", partition=0),
        options,
        pool.tls,
        preflight=lambda abort: pool.check_tls(address, abort=abort),
    )


def _reading(call: H2SubscribeCall) -> tuple[threading.Thread, list[BaseException]]:
    """A thread reading ``call``'s first message, and where what it raises goes."""
    errors: list[BaseException] = []

    def read() -> None:
        try:
            next(call)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    reader = threading.Thread(target=read, name="test-reader", daemon=True)
    reader.start()
    return reader, errors


def _cancel_ends(
    call: H2SubscribeCall, reader: threading.Thread, errors: list[BaseException], what: str
) -> None:
    """``cancel()`` ends the blocked ``what`` within BOUND, with one CANCELLED error."""
    started = time.monotonic()
    call.cancel()
    reader.join(BOUND)
    took = time.monotonic() - started
    assert not reader.is_alive(), f"cancel() did not end the {what} within {BOUND}s"
    assert took < BOUND, f"the read ended {took:.2f}s after cancel()"
    assert len(errors) == 1 and isinstance(errors[0], lb.LiftbridgeError), errors
    assert errors[0].code == "CANCELLED"


@pytest.mark.parametrize(
    ("tls", "step"),
    [(False, "_recv_within"), (True, "do_handshake"), (True, "preflight_tls")],
    ids=["first-frame", "tls-handshake", "tls-pre-flight"],
)
def test_cancel_abandons_the_dial_of_a_call_to_a_silent_broker(
    silent: SilentListener, certs: TestCertificates, tls: bool, step: str
) -> None:
    options = ClientOptions(
        addresses=(silent.address,), rpc_timeout=30.0, tls=_tls(certs) if tls else None
    )
    pool = ChannelPool(options)
    if step == "do_handshake":
        pool._checked.add(silent.address)  # the pre-flight passed earlier
    call = _call_checking_tls(silent.address, options, pool)
    reader, errors = _reading(call)
    wait_until(
        lambda: thread_in(reader, step) and silent.accepted >= 1, what=f"the reader in {step}"
    )
    _cancel_ends(call, reader, errors, "read")
    pool.close()


def _tls_broker(fake: FakeBroker, certs: TestCertificates) -> None:
    """Serve ``fake`` on a TLS port (not started yet) instead of its plaintext one."""
    credentials = grpc.ssl_server_credentials(
        [(certs.server_key.read_bytes(), certs.server_cert.read_bytes())]
    )
    fake.port = fake._server.add_secure_port("127.0.0.1:0", credentials)
    fake.address = f"127.0.0.1:{fake.port}"


@pytest.mark.parametrize("transport", ["h2", "grpc"])
@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_get_timeout_and_close_abandon_a_resubscribe_to_a_silent_leader(
    silent: SilentListener, certs: TestCertificates, tls: bool, transport: str
) -> None:
    """The new leader accepts connections and says nothing: with TLS, the pre-flight
    (5 s) and the handshake (``rpc_timeout``) could not be cut short (with ``"grpc"``,
    the pre-flight ran before the call that close() cancels existed)."""
    cluster = FakeCluster(leader="a")
    a = FakeBroker("a", cluster)
    if tls:
        _tls_broker(a, certs)
    a.start()
    FakeBroker("b", cluster, advertised_port=silent.port)  # never started: an address only
    try:
        a.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "node died"))]
        options = {"tls": _tls(certs)} if tls else {}
        with make_client(
            a, rpc_timeout=30.0, resubscribe_wait=60.0, subscribe_transport=transport, **options
        ) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert sub.get(5).offset == 0
            cluster.leader = "b"
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                sub.get(0.3)
            took = time.monotonic() - started
            assert took < BOUND, f"get(0.3) took {took:.2f}s"
            assert silent.accepted >= 1
            result: list[object] = []
            reader = threading.Thread(target=lambda: result.append(list(sub)), daemon=True)
            reader.start()
            accepted = silent.accepted
            wait_until(lambda: silent.accepted > accepted, what="the reader to dial the leader")
            started = time.monotonic()
            sub.close()
            reader.join(BOUND)
            took = time.monotonic() - started
            assert not reader.is_alive(), f"close() did not end the read within {BOUND}s"
            assert took < BOUND, f"the read ended {took:.2f}s after close()"
            assert result == [[]]  # a closed subscription ends its iteration
    finally:
        a.stop()


def test_cancel_abandons_a_request_write_the_broker_does_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dial's one write (the HTTP/2 preface, the headers and the request) waited, with
    ``rpc_timeout``, for a broker that accepted the connection and read nothing once it
    filled the socket's buffers: no abort could wake it."""
    silent = SilentListener(tiny_window=True)
    real = connect  # what the dial calls

    def small_buffers(host: str, port: int, timeout: float, abort: Any = None) -> socket.socket:
        # Buffers that a request of 16 KB fills (the kernel's floor, a few KiB).
        sock = real(host, port, timeout, abort)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
        return sock

    monkeypatch.setattr(dial_module, "connect", small_buffers)
    options = ClientOptions(addresses=(silent.address,), rpc_timeout=30.0)
    # A stream name of 16,000 bytes: the largest request one HTTP/2 frame carries.
    request = api_pb2.SubscribeRequest(stream="s" * 16_000, partition=0)
    call = H2SubscribeCall(silent.address, request, options, None)
    reader, errors = _reading(call)
    try:
        # send() is C: the dial's own write loop is the innermost frame while it blocks.
        wait_until(
            lambda: silent.accepted >= 1 and _innermost(reader) == "_send_all",
            what="the dial's write to block",
        )
        _cancel_ends(call, reader, errors, "write")
    finally:
        silent.close()


class _UntrustedThenSilent:
    """A TLS listener whose first connection completes a handshake with a certificate
    the client does not trust, and whose later ones are accepted and never answered."""

    def __init__(self, certs: TestCertificates) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(8)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, name="test-untrusted", daemon=True)
        self._thread.start()

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _serve(self) -> None:
        first = True
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            self._held.append(conn)
            if first:
                first = False
                conn.settimeout(5)
                with contextlib.suppress(OSError):  # the client refuses the certificate
                    self._context.wrap_socket(conn, server_side=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (Linux)
        self._server.close()
        for conn in self._held:
            conn.close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """A CA that signed none of ``certs``' certificates."""
    return generate_certificates(tmp_path_factory.mktemp("stranger"), ca_name="stranger CA")


def test_cancel_abandons_the_look_at_an_untrusted_certificate(
    certs: TestCertificates, stranger: TestCertificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a pre-flight found the broker's certificate untrusted, a second connection
    reads the issuer it names (for the error message): it waited what was left of the
    pre-flight's 5 s for a broker that did not answer it, whatever cancelled the call."""
    # The look gets what the pre-flight left of its budget: 30 s, not 5 s, so that a
    # pre-flight slowed down on a loaded machine cannot leave it a window too short
    # for the wait below to see (cancel() must end it all the same).
    monkeypatch.setattr(channels_module, "_PREFLIGHT_TIMEOUT", 30.0)
    broker = _UntrustedThenSilent(certs)
    # Another CA than the one that signed the broker's certificate. (The system's CAs
    # were as untrusting, but loading the store, ~300 files that each give up the GIL
    # and take it back, ran inside the wait below: several seconds of a CI run's 10.)
    options = ClientOptions(
        addresses=(broker.address,),
        rpc_timeout=30.0,
        tls=TLSOptions(ca_cert=str(stranger.ca_cert), server_name="localhost"),
    )
    pool = ChannelPool(options)
    call = _call_checking_tls(broker.address, options, pool)
    reader, errors = _reading(call)
    try:
        wait_until(
            lambda: thread_in(reader, "peer_issuer") and broker.accepted >= 2,
            what=lambda: (
                f"the reader reading the issuer ({broker.accepted} connection(s) accepted; "
                f"errors {errors}; the reader in {stack_of(reader)})"
            ),
        )
        _cancel_ends(call, reader, errors, "read")
    finally:
        pool.close()
        broker.close()


def test_the_pre_flight_and_the_dial_share_one_rpc_timeout(
    silent: SilentListener, certs: TestCertificates
) -> None:
    # The pre-flight took up to rpc_timeout (5 s at most), then the dial started its own
    # rpc_timeout: a broker that accepts and never answers TLS held the first read for
    # both (about 2 x 3 s here). One bound now, taken before the pre-flight.
    rpc_timeout = 3.0
    options = ClientOptions(addresses=(silent.address,), rpc_timeout=rpc_timeout, tls=_tls(certs))
    pool = ChannelPool(options)
    call = _call_checking_tls(silent.address, options, pool)
    started = time.monotonic()
    with pytest.raises(lb.LiftbridgeError) as caught:
        next(call)
    took = time.monotonic() - started
    assert caught.value.code == "UNAVAILABLE"
    # Past one bound by a scheduling margin at most (well short of a second bound).
    assert took < rpc_timeout + 0.75 * rpc_timeout, f"the first read took {took:.2f}s"
    assert "TLS pre-flight" in str(caught.value)
    call.cancel()
    pool.close()
