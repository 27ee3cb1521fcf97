"""A dial over our own HTTP/2 keeps to one bound, ``rpc_timeout``, in all.

Each step used to get the whole ``rpc_timeout`` (the TLS pre-flight, the TCP connect,
the TLS handshake, the write) and the wait for the broker's SETTINGS up to 5 s more:
a broker slow at every step, each just under its timeout, held a dial for several
times the bound. Now the steps share one deadline, and the error names the step that
ran out of time.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, RetryPolicy, TLSOptions
from liftbridge_sync._transport.h2.dial import DialError, dial, open_h2_stream
from liftbridge_sync._transport.tls import TLSSetup
from liftbridge_sync.options import ClientOptions
from liftbridge_sync.testing import TestCertificates, generate_certificates

#: What a bound may be exceeded by on a loaded 2-core machine (scheduling, not waits).
MARGIN = 1.0


#: An HTTP/2 SETTINGS frame with no settings (RFC 9113, 6.5).
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class _SlowTLSBroker:
    """Accepts, lets each TLS handshake wait ``stall`` seconds, completes it (ALPN
    ``h2``) and then sends its HTTP/2 SETTINGS on the first connection only (the
    client's TLS pre-flight), never on the next (the dial): slow at every step, each
    just under the client's own timeout for it."""

    def __init__(self, certs: TestCertificates, stall: float) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
        self._context.set_alpn_protocols(["h2"])
        # No TLS 1.3 session tickets: their records would wake the SETTINGS wait.
        self._context.num_tickets = 0
        self._stall = stall
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._handshakes = 0
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, name="test-slow-tls", daemon=True)
        self._threads.append(accept)
        accept.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._held.append(conn)
            serve = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(serve)
            serve.start()

    def _serve(self, conn: socket.socket) -> None:
        # The fault itself: the broker takes its time (cut short by close()).
        if self._stop.wait(self._stall):
            return
        try:
            tls = self._context.wrap_socket(conn, server_side=True)
        except OSError:
            return
        self._held.append(tls)
        with self._lock:
            self._handshakes += 1
            first = self._handshakes == 1
        if first:  # the client's TLS pre-flight (it dials after that one ends)
            tls.sendall(_EMPTY_SETTINGS)
        self._stop.wait()

    def close(self) -> None:
        self._stop.set()
        # Wakes the accept() under way (closing the listener alone does not, on Linux).
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for thread in self._threads:
            thread.join(5)
        for conn in self._held:
            conn.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def slow_broker(
    request: pytest.FixtureRequest, certs: TestCertificates
) -> Iterator[_SlowTLSBroker]:
    broker = _SlowTLSBroker(certs, request.param)
    try:
        yield broker
    finally:
        broker.close()


@pytest.mark.parametrize("slow_broker", [1.2], indirect=True)
def test_a_publish_dial_slow_at_every_step_ends_within_rpc_timeout(
    slow_broker: _SlowTLSBroker, certs: TestCertificates
) -> None:
    # rpc_timeout 3: the pre-flight's handshake 1.2 s, the dial's 1.2 s, then no
    # SETTINGS: 5.4 s before, when the SETTINGS wait had its own min(rpc_timeout, 5).
    client = Client(
        [slow_broker.address],
        rpc_timeout=3.0,
        tls=TLSOptions(ca_cert=str(certs.ca_cert)),
        retry=RetryPolicy(max_attempts=1),
    )
    try:
        started = time.monotonic()
        with pytest.raises(lb.BrokerUnavailableError) as caught:
            open_h2_stream(client._core, slow_broker.address, 1, lambda event: None)  # noqa: SLF001
        took = time.monotonic() - started
    finally:
        client.close()
    assert took < 3.0 + MARGIN, f"the dial took {took:.2f}s"
    assert "HTTP/2 handshake" in str(caught.value), caught.value
    assert "3s" in str(caught.value), caught.value


@pytest.mark.parametrize("slow_broker", [30.0], indirect=True)
def test_a_dial_whose_tls_handshake_runs_out_of_time_says_so(
    slow_broker: _SlowTLSBroker, certs: TestCertificates
) -> None:
    options = ClientOptions(addresses=(slow_broker.address,), rpc_timeout=1.0)
    setup = TLSSetup(TLSOptions(ca_cert=str(certs.ca_cert)))
    started = time.monotonic()
    with pytest.raises(DialError, match="TLS handshake"):
        dial(slow_broker.address, options, setup, b"/p", 65535)
    assert time.monotonic() - started < 1.0 + MARGIN
