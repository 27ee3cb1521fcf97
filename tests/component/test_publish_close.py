"""``close(timeout=T)`` returns within about ``T`` whatever the broker does.

The publisher thread used to be joined without a limit while it could not be woken: in
the middle of a TCP connect (``rpc_timeout``), waiting for the broker's HTTP/2 handshake
(5 s), or ending a stream the broker does not end (2 s + 5 s). ``close(timeout=1)``
against a broker that accepts connections and never answers took 4-5 s. Now close()
interrupts the dial at its deadline and gives the streams only what is left of
``CLOSE_SLACK``: it returns within ``T + CLOSE_SLACK``, every publish still pending has
failed with a typed error, and no ``liftbridge-*`` thread is left (the suite's
``no_thread_leaks`` fixture).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import AckPolicy, Client, ClientOptions, RetryPolicy, TLSOptions
from liftbridge_sync._publishing.owner import CLOSE_SLACK
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.channels import preflight_tls
from liftbridge_sync._transport.h2.dial import dial
from liftbridge_sync._transport.tls import TLSSetup
from liftbridge_sync.testing import FakeBroker, TestCertificates, generate_certificates
from liftbridge_sync.testing._h2abuse import H2Abuser
from tests.silent_listener import SilentListener
from tests.stacks import frame_of, thread_in
from tests.waiting import wait_until

#: Patient: the dial is retried for longer than any test runs (nothing fails "unavailable").
RETRY = RetryPolicy(max_attempts=1000, max_delay=120.0, initial=0.01, maximum=0.05, jitter=0.0)
#: What the bound may be exceeded by on a loaded 2-core machine (scheduling, not waits).
MARGIN = 0.5


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener(full=False)
    yield listener
    listener.close()


@pytest.fixture
def full() -> Iterator[SilentListener]:
    listener = SilentListener(full=True)
    yield listener
    listener.close()


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    """Clients closed at the end of the test, also when it fails before closing them."""
    made: list[Client] = []
    yield made
    for client in made:
        client.close()


def _publisher_in(client: Client, function: str) -> bool:
    """Whether the client's publisher thread is inside ``function`` (its stack)."""
    publisher = client._publisher
    thread = publisher._loop._thread if publisher is not None else None
    frame = frame_of(thread.ident) if thread is not None else None
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def _close(client: Client, timeout: float | None) -> float:
    started = time.monotonic()
    client.close(timeout=timeout)
    return time.monotonic() - started


@pytest.mark.parametrize("timeout", [0.0, 1.0])
def test_close_returns_within_its_timeout_while_the_broker_withholds_the_handshake(
    silent: SilentListener, timeout: float, clients: list[Client]
) -> None:
    # rpc_timeout 10 s: the handshake wait is its 5 s cap, the 4-5 s close() took.
    client = Client([silent.address], retry=RETRY, rpc_timeout=10.0)
    clients.append(client)
    futures = [client.publish_async("s", b"%d" % i, partition=0) for i in range(3)]
    unacked = client.publish_async("s", b"none", partition=0, ack_policy=AckPolicy.NONE)
    wait_until(lambda: _publisher_in(client, "_await_handshake"), what="the handshake wait")
    took = _close(client, timeout)
    assert took < timeout + CLOSE_SLACK + MARGIN, f"close({timeout}) took {took:.2f}s"
    for future in [*futures, unacked]:
        assert isinstance(future.exception(timeout=0), lb.ClientClosedError)
    assert silent.accepted >= 1


def test_close_returns_within_its_timeout_while_the_connect_waits(
    full: SilentListener, clients: list[Client]
) -> None:
    # The broker's backlog is full: the SYN is dropped, connect() waits rpc_timeout.
    client = Client([full.address], retry=RETRY, rpc_timeout=30.0)
    clients.append(client)
    future = client.publish_async("s", b"x", partition=0)
    wait_until(lambda: _publisher_in(client, "connect"), what="the connect")
    took = _close(client, 1.0)
    assert took < 1.0 + CLOSE_SLACK + MARGIN, f"close(1) took {took:.2f}s"
    assert isinstance(future.exception(timeout=0), lb.ClientClosedError)


def test_close_returns_within_its_timeout_on_grpc_while_the_broker_is_silent(
    silent: SilentListener, clients: list[Client]
) -> None:
    # grpcio connects on its own threads: close() cancels the call it never opened.
    client = Client([silent.address], retry=RETRY, rpc_timeout=10.0, publish_transport="grpc")
    clients.append(client)
    future = client.publish_async("s", b"x", partition=0)
    wait_until(lambda: silent.accepted >= 1, what="grpcio to connect")
    took = _close(client, 1.0)
    assert took < 1.0 + CLOSE_SLACK + MARGIN, f"close(1) took {took:.2f}s"
    assert isinstance(future.exception(timeout=0), lb.ClientClosedError)


def test_close_without_a_timeout_waits_for_the_ack_timeouts_only(
    silent: SilentListener, clients: list[Client]
) -> None:
    # close() waits for the pending publishes until each times out: the longest
    # ack timeout pending bounds it, not the dial.
    client = Client([silent.address], retry=RETRY, rpc_timeout=10.0)
    clients.append(client)
    short = client.publish_async("s", b"short", partition=0, timeout=0.5)
    longer = client.publish_async("s", b"longer", partition=0, timeout=1.5)
    wait_until(lambda: _publisher_in(client, "_await_handshake"), what="the handshake wait")
    took = _close(client, None)
    assert took < 1.5 + CLOSE_SLACK + MARGIN, f"close() took {took:.2f}s"
    # Each failed as it would have without the close: its ack timeout (not sent).
    for future in (short, longer):
        error = future.exception(timeout=0)
        assert isinstance(error, lb.AckTimeoutError), error


def test_close_returns_within_its_timeout_when_the_broker_never_ends_the_stream(
    clients: list[Client],
) -> None:
    # The broker took the stream, then stopped reading and answering: the half-close
    # is never answered, so the stream is cancelled within the slack (it was given 2 s).
    with FakeBroker() as fake, H2Abuser(fake.address) as abuser:
        fake.advertised_port = abuser.port
        client = Client(
            fake.address, retry=RETRY, keepalive_timeout=60.0, resend_after=None, ack_timeout=60
        )
        clients.append(client)
        client.fetch_metadata()  # publish to the leader's advertised address: the proxy
        first = client.publish("s", b"first")
        assert first is not None and first.offset == 0
        abuser.stall()
        pending = client.publish_async("s", b"second")
        took = _close(client, 1.0)
    assert took < 1.0 + CLOSE_SLACK + MARGIN, f"close(1) took {took:.2f}s"
    assert isinstance(pending.exception(timeout=0), lb.ClientClosedError)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_close_returns_within_its_timeout_while_the_tls_pre_flight_waits(
    silent: SilentListener, certs: TestCertificates, clients: list[Client], transport: str
) -> None:
    # The first stream to a TLS broker checks its TLS set-up first (up to 5 s): the
    # listener never answers the ClientHello.
    tls = TLSOptions(ca_cert=str(certs.ca_cert))
    client = Client(
        [silent.address], retry=RETRY, rpc_timeout=10.0, tls=tls, publish_transport=transport
    )
    clients.append(client)
    future = client.publish_async("s", b"x", partition=0)
    wait_until(lambda: _publisher_in(client, "preflight_tls"), what="the TLS pre-flight")
    took = _close(client, 1.0)
    assert took < 1.0 + CLOSE_SLACK + MARGIN, f"close(1) took {took:.2f}s"
    assert isinstance(future.exception(timeout=0), lb.ClientClosedError)


def _abandoned(step: Callable[[DialAbort], object], ready: Callable[[], bool]) -> BaseException:
    """What ``step`` raised once aborted as soon as ``ready()``; fails past 5 s."""
    abort = DialAbort()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            step(abort)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, name="test-dial", daemon=True)
    thread.start()
    wait_until(ready, what="the step to block")
    started = time.monotonic()
    abort.abort()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert len(raised) == 1
    return raised[0]


def _in(thread_name: str, function: str) -> bool:
    """Whether the thread named ``thread_name`` runs inside ``function``."""
    return any(t.name == thread_name and thread_in(t, function) for t in threading.enumerate())


def test_an_abandoned_tls_handshake_of_the_dial_ends_at_once(
    silent: SilentListener, certs: TestCertificates
) -> None:
    options = ClientOptions(addresses=(silent.address,), rpc_timeout=30.0)
    setup = TLSSetup(TLSOptions(ca_cert=str(certs.ca_cert)))
    error = _abandoned(
        lambda abort: dial(silent.address, options, setup, b"/p", 65535, abort=abort),
        lambda: _in("test-dial", "do_handshake"),
    )
    assert isinstance(error, lb.ClientClosedError), error


def test_an_abandoned_tls_pre_flight_ends_at_once(
    silent: SilentListener, certs: TestCertificates
) -> None:
    setup = TLSSetup(TLSOptions(ca_cert=str(certs.ca_cert)))
    error = _abandoned(
        lambda abort: preflight_tls(silent.address, setup, 30.0, abort),
        lambda: _in("test-dial", "preflight_tls") and silent.accepted >= 1,
    )
    assert isinstance(error, lb.ClientClosedError), error


@pytest.mark.parametrize("transport", ["grpc", "h2"])
def test_close_returns_once_the_last_ack_arrives_not_at_the_next_timer(
    clients: list[Client], transport: str
) -> None:
    # close() waits for the pending acks; once the last one has come, it returns. The
    # ack is resolved on the stream's thread, while the publisher thread sleeps until
    # its next timer (here the ack timeout, a minute away): it must be told.
    released = threading.Event()
    with FakeBroker() as fake:
        fake.publish_script = lambda request, n: "ack" if released.wait(30) else "drop"
        client = Client(
            [fake.address], publish_transport=transport, ack_timeout=60.0, resend_after=None
        )
        clients.append(client)
        future = client.publish_async("s", b"acked-during-close")
        closer = threading.Thread(
            target=client.close, kwargs={"timeout": 30.0}, name="test-close", daemon=True
        )
        closer.start()
        wait_until(lambda: _publisher_in(client, "_step"), what="the publisher asleep")
        wait_until(lambda: client._publisher is not None and client._publisher._table.closing)
        released.set()
        assert future.result(timeout=10) is not None
        closer.join(10)
        assert not closer.is_alive(), "close() waited on after the last ack"


def test_a_publish_waiting_for_a_slot_when_close_begins_fails_at_once_unsent(
    clients: list[Client],
) -> None:
    # close() stops accepting publishes: a call still waiting for a free slot
    # (max_in_flight) was not accepted, so it fails then and is never sent, rather than
    # going out when an ack frees a slot and holding close() up for its own ack.
    released = threading.Event()
    with FakeBroker() as fake:
        fake.publish_script = lambda request, n: "ack" if released.wait(30) else "drop"
        client = Client([fake.address], max_in_flight=1, enqueue_timeout=60.0)
        clients.append(client)
        held = client.publish_async("s", b"held")
        outcomes: list[object] = []

        def blocked(method: Callable[..., object]) -> None:
            try:
                outcomes.append(method("s", b"blocked"))
            except lb.LiftbridgeError as exc:
                outcomes.append(exc)

        waiting = [
            threading.Thread(target=blocked, args=(m,), name=f"test-{m.__name__}", daemon=True)
            for m in (client.publish_async, client.publish)
        ]
        for thread in waiting:
            thread.start()
            wait_until(lambda t=thread: thread_in(t, "wait_for_space"), what="a full window")  # type: ignore[misc]
        closer = threading.Thread(
            target=client.close, kwargs={"timeout": 30.0}, name="test-close", daemon=True
        )
        closer.start()
        for thread in waiting:
            thread.join(10)
            assert not thread.is_alive(), "a publish waiting for a slot outlived close()"
        assert [type(o) for o in outcomes] == [lb.ClientClosedError] * 2, outcomes
        released.set()
        assert held.result(timeout=10) is not None  # what was accepted is still acked
        closer.join(10)
        assert not closer.is_alive()
        assert [r.value for r in fake.received] == [b"held"]
