"""Loopback port helpers."""

from __future__ import annotations

import socket
import time

__all__ = ["LOOPBACK", "free_port", "tcp_accepts", "wait_for_tcp"]

LOOPBACK = "127.0.0.1"


def free_port(exclude: frozenset[int] | set[int] = frozenset()) -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    Args:
        exclude: Ports not to return (e.g. ones already handed out).

    Returns:
        The port number.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in exclude:
            return port


def tcp_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return whether a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_tcp(host: str, port: int, timeout: float) -> bool:
    """Poll until ``host:port`` accepts TCP connections.

    Args:
        host: Host to connect to.
        port: Port to connect to.
        timeout: Seconds to keep trying.

    Returns:
        Whether a connection succeeded before the deadline.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        if tcp_accepts(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
