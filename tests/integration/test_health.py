"""Client.check_health against the real server, an unreachable address and a silent one."""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from pathlib import Path

import pytest

from liftbridge_sync import (
    BrokerUnavailableError,
    Client,
    ClientClosedError,
    ConfigurationError,
    Health,
    TLSOptions,
)
from liftbridge_sync.testing import generate_certificates

pytestmark = pytest.mark.integration


def test_a_reachable_cluster_is_healthy(liftbridge_address: str) -> None:
    with Client([liftbridge_address]) as client:
        health = client.check_health(5.0)
        assert isinstance(health, Health)
        assert health.answered_by == liftbridge_address
        assert len(health.brokers) == 1 and health.streams >= 1  # __cursors at least
        assert 0 < health.latency < 5.0


def test_unreachable_addresses_are_named_within_the_budget(liftbridge_address: str) -> None:
    # A listener that accepts and never answers: the check must not wait longer than
    # its budget, whatever the client's rpc_timeout says.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent_address = f"127.0.0.1:{silent.getsockname()[1]}"
        with Client(["127.0.0.1:1", silent_address], rpc_timeout=30.0) as client:
            started = time.monotonic()
            with pytest.raises(BrokerUnavailableError) as caught:
                client.check_health(1.5)
            assert time.monotonic() - started < 4.0
    message = str(caught.value)
    assert "127.0.0.1:1" in message and silent_address in message


def test_a_silent_tls_broker_is_given_up_within_the_budget(tmp_path: Path) -> None:
    # With TLS the first call to a broker runs a TLS pre-flight first. A broker that
    # accepts and never answers held it for min(rpc_timeout, 5 s), whatever the
    # health check's budget: a readiness probe in a fresh worker took 5.5 s, not 0.5.
    certs = generate_certificates(tmp_path, clients=[])
    tls = TLSOptions(ca_cert=str(certs.ca_cert))
    with socket.create_server(("127.0.0.1", 0)) as silent:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with Client([address], tls=tls, rpc_timeout=30.0) as client:
            for _ in range(2):  # and again: a pre-flight cut short is not taken as passed
                started = time.monotonic()
                with pytest.raises(BrokerUnavailableError) as caught:
                    client.check_health(0.5)
                assert time.monotonic() - started < 1.5
                assert address in str(caught.value)
            assert address not in client._session.check().pool._checked


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, 1e300, None, "5"])
def test_bad_budgets_are_typed_errors(timeout: object) -> None:
    with Client(["127.0.0.1:1"]) as client:
        with pytest.raises(ConfigurationError):
            client.check_health(timeout)  # type: ignore[arg-type]


def test_a_client_closed_during_the_check_says_so() -> None:
    # close() from another thread while the check waits on a broker that does not
    # answer: that is no unreachable cluster (BrokerUnavailableError naming each
    # address, as it said), and a readiness view must not report it as one.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(10.0)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        client = Client([address, "127.0.0.1:1"], rpc_timeout=30.0)
        outcome: list[BaseException] = []

        def check() -> None:
            try:
                client.check_health(20.0)
            except BaseException as exc:
                outcome.append(exc)

        checker = threading.Thread(target=check, name="liftbridge-test-health")
        checker.start()
        connection, _ = silent.accept()  # the check is waiting on it
        with connection:
            started = time.monotonic()
            client.close()
            checker.join(10.0)
        assert not checker.is_alive()
        assert time.monotonic() - started < 5.0
        assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError), outcome
        assert "closed" in str(outcome[0])


class _SlowHandshake:
    """A forwarder to a broker whose first bytes back are late by ``delay`` seconds (a
    distant broker's handshake); then it forwards as it comes. Threads ``lbtest-slow``."""

    def __init__(self, target: str, delay: float) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self._listener]
        self._threads = [threading.Thread(target=self._accept, name="lbtest-slow", daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self._target)
            except OSError:
                return
            self._sockets += [client, upstream]
            for source, sink, delay in ((client, upstream, 0.0), (upstream, client, self._delay)):
                thread = threading.Thread(
                    target=self._forward,
                    args=(source, sink, delay),
                    name="lbtest-slow",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()

    @staticmethod
    def _forward(source: socket.socket, sink: socket.socket, delay: float) -> None:
        first = True
        try:
            while data := source.recv(65536):
                if first and delay:
                    time.sleep(delay)  # the fault under test: a late first answer
                first = False
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)


def test_a_broker_slower_to_answer_than_grpcs_first_connect_attempt_is_healthy(
    liftbridge_address: str,
) -> None:
    # gRPC gives a new connection's first attempt 100 ms to see the broker's SETTINGS: a
    # broker whose answer takes 0.3 s failed that attempt at once, and the check said
    # "unreachable within 5 s" after 0.1 s. It is asked again while the budget lasts.
    slow = _SlowHandshake(liftbridge_address, 0.3)
    try:
        with Client([slow.address]) as client:
            started = time.monotonic()
            health = client.check_health(5.0)
            assert time.monotonic() - started < 5.0
            assert health.answered_by == slow.address
    finally:
        slow.close()
