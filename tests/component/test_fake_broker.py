"""The fault-injecting fake broker that ``liftbridge_sync.testing`` ships for users."""

from __future__ import annotations

import contextlib
import re
import threading
import time

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, StartAt
from liftbridge_sync.testing import FakeBroker, FakeCluster, refuse, serve
from tests.constants import SHORT_RETRY
from tests.waiting import wait_until


def test_users_script_slow_and_lost_acks() -> None:
    with FakeBroker() as broker:
        broker.publish_script = lambda request, n: {
            b"slow": ("delay", 0.3),
            b"lost": "drop",
        }.get(request.value, "ack")
        with Client(broker.address, retry=SHORT_RETRY) as client:
            started = time.monotonic()
            slow = client.publish("s", b"slow")
            assert slow is not None and slow.offset == 0
            assert time.monotonic() - started >= 0.3
            lost = client.publish_async("s", b"lost", timeout=0.2)
            with pytest.raises(lb.AckTimeoutError):
                lost.result(5)
            assert [r.value for r in broker.received] == [b"slow", b"lost"]


def test_users_script_a_readonly_refusal_and_a_broken_subscription() -> None:
    with FakeBroker(cluster=FakeCluster(leader="fake", newest_offset=5)) as broker:
        broker.publish_script = lambda request, n: 4  # PublishAsyncError READONLY
        broker.subscribe_scripts = [
            serve([0, 1], then=("UNAVAILABLE", "gone")),
            serve([2], then="end"),
        ]
        with Client(broker.address, retry=SHORT_RETRY) as client:
            with pytest.raises(lb.ReadonlyPartitionError):
                client.publish("s", b"x")
            got = [m.offset for m in client.subscribe("s", start=StartAt.earliest())]
        assert got == [0, 1, 2]
        assert broker.subscribe_starts()[-1][1] == 2  # resumed after the last offset


def test_users_script_not_leader_and_a_refused_subscribe() -> None:
    with FakeBroker() as broker:
        broker.not_leader_times = 1
        broker.subscribe_scripts = [refuse("PERMISSION_DENIED", "not authorized")]
        with Client(broker.address, retry=SHORT_RETRY) as client:
            assert client.fetch_partition_metadata("s", 0).newest_offset == -1
            assert broker.partition_metadata_calls == 2  # refused once, then retried
            with pytest.raises(lb.PermissionDeniedError):
                client.subscribe("s", start=StartAt.earliest())


def test_a_stopped_broker_leaves_no_thread_behind() -> None:
    """The threads serving calls end with the broker, calls in flight or not (they
    stayed, idle, for the rest of the process: one or more per broker a suite made)."""
    before = set(threading.enumerate())
    with FakeBroker() as broker:
        broker.subscribe_scripts = [serve([0])]  # then hangs until cancelled
        with Client(broker.address, retry=SHORT_RETRY) as client:
            assert client.publish("s", b"x") is not None
            subscription = client.subscribe("s", start=StartAt.earliest())
            assert next(iter(subscription)).offset == 0
            serving = [t.name for t in set(threading.enumerate()) - before]
            assert any(name.startswith("liftbridge-fake-broker") for name in serving), serving
            subscription.close()

    def left() -> list[threading.Thread]:
        return [t for t in set(threading.enumerate()) - before if t.is_alive()]

    wait_until(lambda: not left(), 10, lambda: f"threads to end: {[t.name for t in left()]}")


def test_a_delayed_ack_policy_none_publish_is_not_answered_as_the_real_server() -> None:
    # "ack" skips AckPolicy.NONE publishes, as the real server does; ("delay", s)
    # answered them after the delay, which no real broker does.
    import grpc

    from liftbridge_sync._proto import api_pb2, api_pb2_grpc

    with FakeBroker() as broker:
        broker.publish_script = lambda request, n: ("delay", 0.01)
        requests = [
            api_pb2.PublishRequest(
                stream="s", value=b"a", correlationId="none", ackPolicy=api_pb2.NONE
            ),
            api_pb2.PublishRequest(stream="s", value=b"b", correlationId="acked"),
        ]
        with grpc.insecure_channel(broker.address) as channel:
            stub = api_pb2_grpc.APIStub(channel)  # type: ignore[no-untyped-call]
            answers = [r.correlationId for r in stub.PublishAsync(iter(requests), timeout=10)]
    assert answers == ["acked"]


def test_a_closed_proxy_leaves_no_descriptor_open() -> None:
    import os

    from liftbridge_sync.testing import TcpProxy

    with FakeBroker() as broker:
        before = len(os.listdir("/proc/self/fd"))
        proxy = TcpProxy(broker.address).start()
        proxy.close()
        assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("action", ["dorp", None, ("dealy", 5), ("delay", "5"), True])
def test_a_publish_script_typo_is_a_clear_error_not_an_ack(action: object) -> None:
    """A script's action that is none of the documented ones failed nothing: "dorp" and
    None were acked, ("dealy", 5) was read as error code 5. Now the publish fails with
    the list of valid actions, and stopping the broker raises it (a test that expects
    a failure anyway still learns of the typo)."""
    broker = FakeBroker().start()
    try:
        broker.publish_script = lambda request, n: action
        with Client(broker.address, retry=SHORT_RETRY) as client:
            with pytest.raises(lb.LiftbridgeError, match='valid actions: .*"drop"'):
                client.publish("s", b"x")
        assert broker.received  # the broker answered it: the client did not give up
    finally:
        with pytest.raises(lb.ConfigurationError, match=f"returned {re.escape(repr(action))}"):
            broker.stop()
    assert len(broker.script_errors) >= 1


def test_a_bad_script_is_refused_when_it_is_given() -> None:
    for then in ("hnag", ("NOPE", "x"), ("UNAVAILABLE",), None):
        with pytest.raises(lb.ConfigurationError, match="then=|not a gRPC status"):
            serve([0], then=then)  # type: ignore[arg-type]
    with pytest.raises(lb.ConfigurationError, match="UNAVAILABLE"):
        refuse("UNAVAIL", "gone")
    broker = FakeBroker()
    with pytest.raises(lb.ArgumentTypeError, match="publish_script must be a callable"):
        broker.publish_script = "drop"  # type: ignore[assignment]
    broker.stop()


def test_a_proxy_client_that_stops_reading_stalls_only_its_own_connection() -> None:
    """The proxy wrote with a blocking ``sendall``: one client that stopped reading
    held its thread, so every other connection through it went silent, and close()
    gave up after 5 s with the thread still there. Now what a client does not read
    waits in a bounded buffer and stops the reads from its server only."""
    import socket

    from liftbridge_sync.testing import TcpProxy

    flood = b"x" * (64 << 20)
    flood_sent = threading.Event()
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    handlers: list[threading.Thread] = []

    def handle(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if conn.recv(1) == b"F":
                conn.sendall(flood)  # ends by the proxy's close at the latest
                flood_sent.set()
            else:
                while data := conn.recv(100):
                    conn.sendall(data)

    def accept(count: int) -> None:
        for _ in range(count):
            conn, _ = server.accept()
            handler = threading.Thread(target=handle, args=(conn,), daemon=True)
            handler.start()
            handlers.append(handler)

    acceptor = threading.Thread(target=accept, args=(2,), daemon=True)
    acceptor.start()
    forwarded = [0]
    proxy = TcpProxy(f"127.0.0.1:{server.getsockname()[1]}")
    proxy.tap = lambda number, from_client, data: (
        forwarded.__setitem__(0, forwarded[0] + len(data)) if not from_client else None
    )
    proxy.start()
    host, port = proxy.address.split(":")
    try:
        with (
            socket.create_connection((host, int(port)), timeout=10) as slow,
            socket.create_connection((host, int(port)), timeout=10) as echo,
        ):
            slow.sendall(b"F")  # and never reads
            wait_until(lambda: forwarded[0] >= 1 << 20, 10, "the flood to reach the proxy")
            echo.sendall(b"Eping")
            answer = b""
            while len(answer) < 4:
                answer += echo.recv(100)  # times out (10 s) if the proxy is stuck
            assert answer == b"ping"
            # Bounded: the proxy did not take the whole flood into memory either.
            assert not flood_sent.wait(1.0)
            assert forwarded[0] < 32 << 20
            threads = {t for t in threading.enumerate() if t.name == "lbtest-proxy"}
            assert threads
            started = time.monotonic()
            proxy.close()
            assert time.monotonic() - started < 2.0
            assert not any(t.is_alive() for t in threads)
    finally:
        proxy.close()
        server.close()
        for thread in [acceptor, *handlers]:
            thread.join(10)
            assert not thread.is_alive()
