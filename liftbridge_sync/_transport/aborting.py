"""Abandoning a dial from another thread: the publisher's ``close()`` at its deadline, a
subscribe call's ``cancel()`` (the subscription's ``close()``, a ``get(timeout)`` deadline),
the client's ``close()`` (the TLS questions of its unary calls).

A dial blocks in the kernel: a TCP connect waits for the broker's SYN-ACK (up to
``rpc_timeout``), a TLS handshake and the wait for the broker's first HTTP/2 frame for
its answers. Nothing in them looks at a flag, but a blocked socket call returns as soon
as its socket is shut down. The dialling thread does each blocking step inside
:meth:`DialAbort.watching`; :meth:`DialAbort.abort`, from any thread, shuts the socket
of the step under way down and makes that step, and every later one, raise
:class:`~liftbridge_sync.errors.ClientClosedError`. :func:`connect` is
:func:`socket.create_connection` with each connect so watched, and the name lookup
before them bounded (:func:`resolve`).

A name lookup (``getaddrinfo``) cannot be woken at all, and the system resolver's own
timeouts (5 s per server and attempt by default) can add up to far more than
``rpc_timeout``. :func:`resolve` therefore runs a lookup of a host name on a
short-lived ``liftbridge-resolve`` thread and waits for it until the timeout or the
abort; a lookup given up on is left to end by itself on that daemon thread (its answer
is dropped). A numeric address needs no lookup and starts no thread, and a name whose
lookup is under way starts none either: its dial waits for that lookup (a resolver that
hangs would otherwise gather a thread per dial given up on: a publisher redials every
second).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from liftbridge_sync.errors import ClientClosedError, LocalResourceError

__all__ = ["RESOLVE_THREAD", "DialAbort", "connect", "resolve", "waiting", "watching"]

_ABANDONED = "the dial was abandoned: its owner is closing or gave up"
#: The name of the thread a host name is looked up on (see :func:`resolve`).
RESOLVE_THREAD = "liftbridge-resolve"

#: What :func:`socket.getaddrinfo` returns.
AddrInfo = Sequence[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]]


class DialAbort:
    """Lets another thread abandon one owner's dials, for good.

    Each dialling thread runs one step at a time (:meth:`watching`); several threads may
    dial at once (a client's unary calls to several brokers), and :meth:`abort` wakes
    the step of each. Thread-safe.
    """

    __slots__ = ("_aborted", "_lock", "_wakes")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        #: Wakes each blocking step under way.
        self._wakes: list[Callable[[], None]] = []

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` was called."""
        return self._aborted

    def abort(self) -> None:
        """Wake each blocking step under way, if any, and refuse every later one."""
        with self._lock:
            self._aborted = True
            for wake in self._wakes:
                wake()

    def check(self) -> None:
        """Raise if the dial was abandoned.

        Raises:
            ClientClosedError: :meth:`abort` was called.
        """
        if self._aborted:
            raise ClientClosedError(_ABANDONED)

    def watching(self, sock: socket.socket) -> AbstractContextManager[None]:
        """Run one blocking step on ``sock``, which :meth:`abort` wakes by shutting
        ``sock`` down; leave ``sock`` open (closing it is the caller's).

        Raises:
            ClientClosedError: the dial was abandoned, before or during the step (then
                whatever the step raised is its ``__cause__``).
        """
        return self._step(lambda: _shut_down(sock))

    def waiting(self, event: threading.Event) -> AbstractContextManager[None]:
        """Run one wait for ``event``, which :meth:`abort` sets (as :meth:`watching`).

        Raises:
            ClientClosedError: the dial was abandoned, before or during the wait.
        """
        return self._step(event.set)

    @contextlib.contextmanager
    def _step(self, wake: Callable[[], None]) -> Iterator[None]:
        with self._lock:
            self.check()
            self._wakes.append(wake)
        try:
            yield
        except BaseException as exc:
            if self._aborted:
                raise ClientClosedError(_ABANDONED) from exc
            raise
        finally:
            with self._lock:
                self._wakes.remove(wake)
        self.check()  # a step that returned because its socket was shut down


def _shut_down(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for an SSLSocket (whose own shutdown drops its
    # SSL object under the thread using it). A socket the dialling thread closed
    # meanwhile has no descriptor any more: EBADF, ignored.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def watching(abort: DialAbort | None, sock: socket.socket) -> AbstractContextManager[None]:
    """A blocking step on ``sock`` that ``abort`` (if any) can wake (see
    :meth:`DialAbort.watching`)."""
    return contextlib.nullcontext() if abort is None else abort.watching(sock)


def waiting(abort: DialAbort | None, event: threading.Event) -> AbstractContextManager[None]:
    """A wait for ``event`` that ``abort`` (if any) can wake (see
    :meth:`DialAbort.waiting`)."""
    return contextlib.nullcontext() if abort is None else abort.waiting(event)


def resolve(host: str, port: int, timeout: float, abort: DialAbort | None = None) -> AddrInfo:
    """The TCP addresses of ``host`` (:func:`socket.getaddrinfo`), looked up for at most
    ``timeout`` seconds and abandoned as soon as ``abort`` aborts.

    A numeric address is answered at once. A host name is looked up on a
    ``liftbridge-resolve`` daemon thread, which a lookup given up on leaves running
    until the system resolver gives up by itself (its answer is then dropped).

    Raises:
        OSError: the name is unknown (``socket.gaierror``), or ``TimeoutError`` when the
            lookup took longer than ``timeout``.
        ClientClosedError: ``abort`` aborted.
    """
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a host name: looked up below
    key = (host, port)
    with _LOOKUPS_LOCK:
        lookup = _LOOKUPS.get(key)
        started = lookup is None
        if lookup is None:
            lookup = _LOOKUPS[key] = _Lookup(host, port)
    thread = None
    if started:
        thread = threading.Thread(target=lookup.run, name=RESOLVE_THREAD, daemon=True)
        try:
            thread.start()
        except RuntimeError:
            lookup.run()  # out of threads: here, unbounded (as socket.create_connection)
            return lookup.answer()
    # A wait of its own: an abort sets it, never the lookup's (others wait for that).
    woken = threading.Event()
    with contextlib.nullcontext() if abort is None else abort.waiting(woken):
        lookup.wait(woken, timeout)
    if not lookup.done.is_set():
        raise TimeoutError(f"the name lookup of {host!r} took longer than {timeout:g}s")
    if thread is not None:
        thread.join(timeout)  # it has set `done`: it is returning
    return lookup.answer()


class _Lookup:
    """One ``getaddrinfo`` whose answer, or error, the threads waiting for it pick up.

    Thread-safe: its answer is written once, before :attr:`done` is set.
    """

    __slots__ = ("_args", "_error", "_result", "_waiters", "done")

    def __init__(self, host: str, port: int) -> None:
        self._args = (host, port)
        self._result: AddrInfo | None = None
        self._error: BaseException | None = None
        #: Set once the answer or the error is in.
        self.done = threading.Event()
        #: The events of the threads waiting for it, set with :attr:`done` (under
        #: _LOOKUPS_LOCK).
        self._waiters: list[threading.Event] = []

    def wait(self, woken: threading.Event, timeout: float) -> None:
        """Wait until the answer is in, ``timeout`` passes or ``woken`` is set by
        another (an abort)."""
        with _LOOKUPS_LOCK:
            if self.done.is_set():
                return
            self._waiters.append(woken)
        try:
            woken.wait(timeout)
        finally:
            with _LOOKUPS_LOCK:
                self._waiters.remove(woken)

    def run(self) -> None:
        try:
            self._result = socket.getaddrinfo(*self._args, 0, socket.SOCK_STREAM)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting threads
            self._error = exc
        finally:
            with _LOOKUPS_LOCK:
                if _LOOKUPS.get(self._args) is self:  # a later dial looks it up afresh
                    del _LOOKUPS[self._args]
                self.done.set()
                for woken in self._waiters:
                    woken.set()

    def answer(self) -> AddrInfo:
        """What :meth:`run` got: the addresses, or (a copy of) its error raised."""
        if self._error is not None:
            # A copy for each waiting thread: one exception object raised on several
            # threads at once would gather all their tracebacks.
            raise copy.copy(self._error)
        assert self._result is not None
        return list(self._result)


#: The lookups under way, by ``(host, port)``: a dial of a name being looked up waits
#: for that lookup instead of starting another.
_LOOKUPS: dict[tuple[str, int], _Lookup] = {}
_LOOKUPS_LOCK = threading.Lock()


def _forget_lookups_in_child() -> None:
    # The lookups under way have no thread in a forked child: waiting for one, each
    # dial of its name would time out. A parent thread may have held the lock at fork.
    global _LOOKUPS_LOCK
    _LOOKUPS.clear()
    _LOOKUPS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_lookups_in_child)


def connect(host: str, port: int, timeout: float, abort: DialAbort | None = None) -> socket.socket:
    """:func:`socket.create_connection` (each address in turn), within ``timeout`` in
    all, the name lookup (:func:`resolve`) included, and the lookup and every connect
    abandoned when ``abort`` aborts. (With ``timeout`` for each address, a name with
    three addresses that drop SYNs took three times the caller's time.)

    Raises:
        OSError: the name lookup failed or took longer than ``timeout``, or no address
            could be connected to (the last address's error).
        LocalResourceError: the process (or the system) has no file descriptor left
            for the socket or the name lookup: nothing the broker did.
        ClientClosedError: ``abort`` aborted.
    """
    if abort is not None:
        abort.check()
    deadline = time.monotonic() + timeout
    error: OSError | None = None
    try:
        addresses = resolve(host, port, timeout, abort)
    except OSError as exc:
        _refuse_if_out_of_descriptors(exc, host, port)
        raise
    for family, kind, proto, _, address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            error = TimeoutError(f"connect to {host}:{port} timed out after {timeout:g}s")
            break
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            _refuse_if_out_of_descriptors(exc, host, port)
            raise
        try:
            sock.settimeout(left)
            with watching(abort, sock):
                sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        # The steps that follow (TLS, HTTP/2 handshakes) each keep to the timeout, as
        # they did: only the connect shares it.
        sock.settimeout(timeout)
        return sock
    if error is None:
        raise OSError(f"no address found for {host}")
    raise error


#: A socket (or a name lookup's) failing for want of a file descriptor: in the process
#: (EMFILE, "Too many open files") or in the whole system (ENFILE).
_NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE})


def _refuse_if_out_of_descriptors(error: OSError, host: str, port: int) -> None:
    """Raise a :class:`LocalResourceError` instead of ``error`` if it means that no file
    descriptor was left: retrying such a dial would take the whole retry policy (or a
    subscription's ``resubscribe_wait``) and end blaming the broker, never asked.

    Raises:
        LocalResourceError: ``error`` is ``EMFILE`` or ``ENFILE``.
    """
    if error.errno in _NO_DESCRIPTOR:
        raise LocalResourceError(
            f"cannot connect to {host}:{port}: this process has no file descriptor left "
            f"({error.strerror or error}); close connections it no longer needs or raise "
            "its open-file limit (ulimit -n)"
        ) from error
