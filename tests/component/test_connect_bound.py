"""A connect keeps to its timeout in all, however many addresses the name has.

Each address was given the whole timeout: a name with six addresses that drop SYNs
(a blackholed subnet) took six times a caller's ``rpc_timeout``, and the TLS
pre-flight, which keeps to the time left of its caller's call, ran that far past it.
"""

from __future__ import annotations

import socket
import time

import pytest

from liftbridge_sync._transport import aborting
from tests.silent_listener import SilentListener

_TIMEOUT = 0.5


def test_a_connect_to_a_name_with_many_unanswering_addresses_keeps_to_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listeners = [SilentListener(full=True) for _ in range(6)]
    addresses = [
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", lis.port))
        for lis in listeners
    ]
    monkeypatch.setattr(aborting, "resolve", lambda host, port, timeout, abort=None: addresses)
    try:
        started = time.monotonic()
        with pytest.raises(OSError):
            aborting.connect("many.example", 9292, _TIMEOUT)
        elapsed = time.monotonic() - started
    finally:
        for listener in listeners:
            listener.close()
    assert elapsed < 3 * _TIMEOUT, f"{elapsed:.2f}s for a {_TIMEOUT}s connect"
