"""Abandoning a dial from another thread: the publisher's ``close()`` at its deadline, a
subscribe call's ``cancel()`` (the subscription's ``close()``, a ``get(timeout)`` deadline).

A dial blocks in the kernel: a TCP connect waits for the broker's SYN-ACK (up to
``rpc_timeout``), a TLS handshake and the wait for the broker's first HTTP/2 frame for
its answers. Nothing in them looks at a flag, but a blocked socket call returns as soon
as its socket is shut down. The dialling thread does each blocking step inside
:meth:`DialAbort.watching`; :meth:`DialAbort.abort`, from any thread, shuts the socket
of the step under way down and makes that step, and every later one, raise
:class:`~liftbridge_sync.errors.ClientClosedError`. :func:`connect` is
:func:`socket.create_connection` with each connect so watched.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager

from liftbridge_sync.errors import ClientClosedError

__all__ = ["DialAbort", "connect", "watching"]

_ABANDONED = "the dial was abandoned: its owner is closing or gave up"


class DialAbort:
    """Lets another thread abandon one owner's dials, for good.

    One thread dials at a time (:meth:`watching` watches one socket); :meth:`abort` and
    :attr:`aborted` are thread-safe.
    """

    __slots__ = ("_aborted", "_lock", "_watched")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._watched: socket.socket | None = None

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` was called."""
        return self._aborted

    def abort(self) -> None:
        """Wake the blocking step under way, if any, and refuse every later one."""
        with self._lock:
            self._aborted = True
            sock = self._watched
            if sock is not None:
                # The plain socket's shutdown, also for an SSLSocket (whose own shutdown
                # drops its SSL object under the thread using it). A socket the dialling
                # thread closed meanwhile has no descriptor any more: EBADF, ignored.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def check(self) -> None:
        """Raise if the dial was abandoned.

        Raises:
            ClientClosedError: :meth:`abort` was called.
        """
        if self._aborted:
            raise ClientClosedError(_ABANDONED)

    @contextlib.contextmanager
    def watching(self, sock: socket.socket) -> Iterator[None]:
        """Run one blocking step on ``sock``, which :meth:`abort` wakes by shutting
        ``sock`` down; leave ``sock`` open (closing it is the caller's).

        Raises:
            ClientClosedError: the dial was abandoned, before or during the step (then
                whatever the step raised is its ``__cause__``).
        """
        with self._lock:
            self.check()
            self._watched = sock
        try:
            yield
        except BaseException as exc:
            if self._aborted:
                raise ClientClosedError(_ABANDONED) from exc
            raise
        finally:
            with self._lock:
                self._watched = None
        self.check()  # a step that returned because its socket was shut down


def watching(abort: DialAbort | None, sock: socket.socket) -> AbstractContextManager[None]:
    """A blocking step on ``sock`` that ``abort`` (if any) can wake (see
    :meth:`DialAbort.watching`)."""
    return contextlib.nullcontext() if abort is None else abort.watching(sock)


def connect(host: str, port: int, timeout: float, abort: DialAbort | None) -> socket.socket:
    """:func:`socket.create_connection` (each address in turn, ``timeout`` each), with
    every connect watched by ``abort``; the name lookup is not.

    Raises:
        OSError: no address could be connected to (the last address's error).
        ClientClosedError: ``abort`` aborted.
    """
    if abort is None:
        return socket.create_connection((host, port), timeout=timeout)
    abort.check()
    error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            with abort.watching(sock):
                sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    if error is None:
        raise OSError(f"no address found for {host}")
    raise error
