"""``Client.close()`` from another thread cuts short the TLS questions of a unary call: the
TLS pre-flight before a broker's first channel (up to 5 s) and the probe asking a port
that closed a plaintext connection whether it speaks TLS (up to 2 s) waited for a broker
that accepted the connection and said nothing, after close() had returned."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, ClientOptions, RetryPolicy, TLSOptions
from liftbridge_sync._transport import channels as channels_module
from liftbridge_sync._transport import roster as roster_module
from liftbridge_sync._transport.h2 import connection as h2_connection
from liftbridge_sync.testing import TestCertificates, generate_certificates
from tests.silent_listener import SilentListener
from tests.stacks import thread_in
from tests.waiting import wait_until

#: What a bound may be exceeded by on a loaded 2-core machine (scheduling, not waits).
BOUND = 2.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"))


class _PlaintextCloser:
    """Closes every connection that starts in plaintext (gRPC's HTTP/2 preface: "socket
    closed" at connect, as a TLS-only broker does) and holds those that start a TLS
    handshake without a word."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-closer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._server.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                first = conn.recv(65536)
            except OSError:
                first = b""
            if first.startswith(b"\x16"):  # a TLS record: the client hello
                self.held.append(conn)
                continue
            # A FIN, not a reset (closing with bytes unread would send one): drain what
            # the client still sends until it closes its side too.
            try:
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()
        for conn in self.held:
            conn.close()


def _close_during(client: Client, call: str, step: str, ready: Callable[[], bool]) -> None:
    """Start ``call`` on a thread, wait for it in ``step`` (and ``ready()``), close the
    client: the call must end with ``ClientClosedError`` within :data:`BOUND`."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            getattr(client, call)()
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    caller = threading.Thread(target=run, name="test-caller", daemon=True)
    caller.start()
    wait_until(lambda: thread_in(caller, step) and ready(), what=f"the call in {step}")
    started = time.monotonic()
    client.close()
    caller.join(BOUND)
    took = time.monotonic() - started
    assert not caller.is_alive(), f"close() did not end the call within {BOUND}s"
    assert took < BOUND, f"the call ended {took:.2f}s after close()"
    assert len(errors) == 1 and isinstance(errors[0], lb.ClientClosedError), errors


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()


def test_close_cuts_the_tls_pre_flight_of_a_unary_call_short(
    silent: SilentListener, certs: TestCertificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channels_module, "_PREFLIGHT_TIMEOUT", 30.0)  # else 5 s
    options = ClientOptions(
        addresses=(silent.address,),
        rpc_timeout=30.0,
        retry=RetryPolicy.no_retry(),
        tls=TLSOptions(ca_cert=str(certs.ca_cert), server_name="localhost"),
    )
    client = Client.from_options(options)
    _close_during(client, "fetch_metadata", "preflight_tls", lambda: silent.accepted >= 1)


def test_close_cuts_the_question_whether_a_port_speaks_tls_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(roster_module, "TLS_QUESTION_WAIT", 30.0)  # else 2 s
    closer = _PlaintextCloser()
    try:
        options = ClientOptions(
            addresses=(closer.address,), rpc_timeout=30.0, retry=RetryPolicy.no_retry()
        )
        client = Client.from_options(options)
        _close_during(client, "fetch_metadata", "speaks_tls", lambda: bool(closer.held))
    finally:
        closer.close()


def test_close_cuts_the_publish_streams_question_whether_a_port_speaks_tls_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A publish stream whose plaintext connection the broker closed before any HTTP/2
    frame asks the port, on its I/O thread, whether it requires TLS (2 s per step):
    ``Client.close()``, which joins that thread, waited for the question."""
    monkeypatch.setattr(h2_connection, "TLS_QUESTION_WAIT", 30.0)  # else 2 s
    closer = _PlaintextCloser()
    options = ClientOptions(
        addresses=(closer.address,), rpc_timeout=30.0, retry=RetryPolicy.no_retry()
    )
    client = Client.from_options(options)
    try:
        client.publish_async("s", b"v", partition=0, timeout=60.0)
        wait_until(
            lambda: any(
                t.name == "liftbridge-publish-io" and thread_in(t, "speaks_tls")
                for t in threading.enumerate()
            ),
            timeout=30,
            what="the publish stream's I/O thread asking the port",
        )
        started = time.monotonic()
        client.close(timeout=0.2)  # the pending publish's wait, then the I/O thread's
        took = time.monotonic() - started
        assert took < 0.2 + BOUND, f"close() took {took:.2f}s"
        # The publisher's shutdown cut the question short, then joined the thread.
        assert not [t.name for t in threading.enumerate() if t.name == "liftbridge-publish-io"]
    finally:
        client.close(timeout=BOUND)
        closer.close()
