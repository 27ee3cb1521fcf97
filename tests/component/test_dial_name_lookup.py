"""The name lookup of an ``"h2"`` dial is bounded by ``rpc_timeout`` and abandoned with
the dial.

``getaddrinfo`` cannot be woken, and the system resolver's timeouts (5 s per server and
attempt) add up to far more than ``rpc_timeout``: a broker's host name whose DNS server
stopped answering held the dial, the publisher's ``close()`` and a subscription's
``close()`` and ``get(timeout)`` deadline for as long. The lookup now runs on a
``liftbridge-resolve`` thread that the dial waits for until its timeout or its abort.

The hung resolver is a fault injected for one host name (``socket.getaddrinfo`` waits
until the test releases it); every other name resolves as usual.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import liftbridge_sync as lb
from liftbridge_sync import ClientOptions
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import RESOLVE_THREAD, DialAbort, connect, resolve
from liftbridge_sync._transport.h2.dial import DialError, dial
from liftbridge_sync._transport.h2_subscribe import H2SubscribeCall
from tests.waiting import wait_until

#: The host name whose lookup hangs.
HUNG = "hung-resolver.invalid"
#: What a bound may be exceeded by on a loaded 2-core machine (scheduling, not waits).
MARGIN = 1.0


class _HungResolver:
    """``socket.getaddrinfo`` that never answers for :data:`HUNG` until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, *args: Any) -> Any:
            numeric = len(args) >= 5 and args[4] & socket.AI_NUMERICHOST
            if host == HUNG and not numeric:  # a numeric-only lookup asks no server
                self.asked.set()
                self.release.wait(30)
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            return real(host, *args)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _resolvers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == RESOLVE_THREAD]


@pytest.fixture
def hung(monkeypatch: pytest.MonkeyPatch) -> Iterator[_HungResolver]:
    resolver = _HungResolver(monkeypatch)
    yield resolver
    # The abandoned lookups end as the resolver answers (no thread is left behind).
    resolver.release.set()
    wait_until(lambda: not _resolvers(), 5, "the abandoned lookups to end")


def test_a_lookup_that_hangs_fails_the_dial_after_rpc_timeout(hung: _HungResolver) -> None:
    options = ClientOptions(addresses=(f"{HUNG}:9292",), rpc_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(DialError, match="name lookup .* took longer than 0.5s"):
        dial(f"{HUNG}:9292", options, None, b"/p", 65535)
    took = time.monotonic() - started
    assert took < 0.5 + MARGIN, f"the dial took {took:.2f}s"
    assert hung.asked.is_set()


def test_an_aborted_lookup_ends_at_once(hung: _HungResolver) -> None:
    abort = DialAbort()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            connect(HUNG, 9292, 30.0, abort)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            raised.append(exc)

    thread = threading.Thread(target=run, name="test-dial", daemon=True)
    thread.start()
    assert hung.asked.wait(5)
    started = time.monotonic()
    abort.abort()
    thread.join(5)
    took = time.monotonic() - started
    assert not thread.is_alive() and took < MARGIN, f"the lookup ended {took:.2f}s after abort"
    assert len(raised) == 1 and isinstance(raised[0], lb.ClientClosedError), raised


def test_a_subscribe_call_cancelled_in_its_lookup_is_cancelled(hung: _HungResolver) -> None:
    options = ClientOptions(addresses=(f"{HUNG}:9292",), rpc_timeout=30.0)
    call = H2SubscribeCall(
        f"{HUNG}:9292", api_pb2.SubscribeRequest(stream="s", partition=0), options
    )
    raised: list[BaseException] = []

    def read() -> None:
        try:
            next(call)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            raised.append(exc)

    reader = threading.Thread(target=read, name="test-reader", daemon=True)
    reader.start()
    assert hung.asked.wait(5)
    started = time.monotonic()
    call.cancel()
    reader.join(5)
    took = time.monotonic() - started
    assert not reader.is_alive() and took < MARGIN, f"the read ended {took:.2f}s after cancel"
    assert len(raised) == 1 and isinstance(raised[0], lb.LiftbridgeError), raised
    assert raised[0].code == "CANCELLED"


def test_names_resolve_and_unknown_ones_fail_as_before() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        for host in ("localhost", "127.0.0.1"):
            with connect(host, port, 5.0) as sock:
                assert sock.getpeername()[1] == port
    with pytest.raises(socket.gaierror):
        resolve("no-such-host.invalid", 1, 5.0)
    wait_until(lambda: not _resolvers(), 5, "the lookups' threads to end")


def test_dials_of_a_name_whose_lookup_hangs_share_one_lookup(hung: _HungResolver) -> None:
    # Each dial given up on left its lookup running on a thread of its own: a publisher
    # redialling every second, and each subscription's resubscribes, piled up threads
    # (and resolver queries) for as long as the resolver hung. A dial of a name whose
    # lookup is under way waits for that one.
    for _ in range(5):
        with pytest.raises(TimeoutError):
            resolve(HUNG, 9292, 0.05)
    assert len(_resolvers()) == 1
    # A later dial still gets the answer, once the resolver gives it.
    raised: list[BaseException] = []

    def dial_again() -> None:
        try:
            resolve(HUNG, 9292, 30.0)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            raised.append(exc)

    waiter = threading.Thread(target=dial_again, name="test-dial", daemon=True)
    waiter.start()
    wait_until(lambda: len(_resolvers()) == 1 and waiter.is_alive(), 5, "the dial waiting")
    hung.release.set()
    waiter.join(5)
    assert not waiter.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], socket.gaierror), raised
    assert len(_resolvers()) <= 1


FORKED = textwrap.dedent(
    f"""
    import faulthandler, os, socket, sys, threading
    from liftbridge_sync._transport.aborting import resolve

    release = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args):
        if host == {HUNG!r} and not (len(args) >= 5 and args[4] & socket.AI_NUMERICHOST):
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args)

    socket.getaddrinfo = getaddrinfo
    try:
        resolve({HUNG!r}, 9292, 0.05)
    except TimeoutError:
        pass  # the lookup goes on, on a thread the child will not have
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(15, exit=True)
        release.set()  # the child's resolver answers at once
        try:
            resolve({HUNG!r}, 9292, 2.0)
        except socket.gaierror:
            os._exit(0)
        except TimeoutError:
            os._exit(1)
        os._exit(2)
    _, status = os.waitpid(pid, 0)
    release.set()
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_child_looks_a_name_up_afresh() -> None:
    # The lookup under way at the fork has no thread in the child: waiting for it, the
    # child's dials of that name would all time out.
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
