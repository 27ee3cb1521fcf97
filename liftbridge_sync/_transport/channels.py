"""gRPC channels, one set per broker address.

Two channels are kept per address: one for unary RPCs and the ``PublishAsync`` stream,
and one for ``Subscribe`` that uses gRPC's experimental ``SingleThreadedUnaryStream``
option, which reads a server stream on the calling thread with no hand-off (measured 5-8x
cheaper per message than the default on a 2-core VM; performance.md §6.3).

With TLS, the first channel to each broker is preceded by a *pre-flight*: one TLS
handshake made with Python's ``ssl`` and the same roots and certificates (one
:class:`~liftbridge_sync._transport.tls.TLSSetup` per client; see :func:`preflight_tls`).
It exists because gRPC reports a failed handshake poorly: as UNAVAILABLE (retried for
seconds), with "TSI_DATA_CORRUPTED" for both a missing and an unknown client certificate,
and with the real cause only in lines the C-core writes to the process's stderr. The
pre-flight names the cause in a non-retryable :class:`~liftbridge_sync.errors.TLSError` at
once, and gRPC never makes the failing handshake, so it has nothing to print.

Why not ``GRPC_VERBOSITY=NONE`` instead: gRPC reads it once, when the C-core starts,
and it applies to the whole process. Setting it from a library would silence every
other gRPC user in the process (their real errors included), and would only work if
we were imported before anything else touched grpc. The pre-flight is scoped to our own
connections; an application that wants no C-core logging at all can still set
``GRPC_VERBOSITY=NONE`` itself before starting.
"""

from __future__ import annotations

import collections
import contextlib
import ssl
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import grpc
import grpc.experimental

from liftbridge_sync._proto import api_pb2_grpc
from liftbridge_sync._transport.aborting import DialAbort, connect, watching
from liftbridge_sync._transport.tls import TLSSetup, peer_issuer
from liftbridge_sync._wire.status import error_from_tls_exception
from liftbridge_sync.errors import ClientClosedError, ForkedClientError
from liftbridge_sync.options import ClientOptions, parse_address

__all__ = ["ChannelPool", "Releaser", "Stub", "preflight_tls"]

Stub = api_pb2_grpc.APIStub

#: Defaults that avoid failures rather than add speed: large requests are legal up to
#: the server's limits (received ones up to ``max_receive_message_size``); brokers on
#: private addresses must not be sent through an HTTP proxy picked up from the
#: environment; and a restarted broker is redialled within a second or two instead of
#: gRPC's default back-off (1 s growing to 120 s), which would otherwise dominate
#: failover time. PINGs stay within what a grpc-go server (every broker) allows by
#: default, or it ends the connection with GOAWAY ``too_many_pings``: none without a
#: call in progress, at most two without data in between, and keepalive PINGs (from
#: ``keepalive_interval``, 5 minutes by default) never more often than every 5 minutes.
_BASE_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


#: The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server answers it with
#: its own SETTINGS, which proves the connection was accepted (TLS 1.3 servers judge the
#: client certificate after the client's handshake has already "succeeded").
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: Upper bound of one pre-flight, seconds (it is also bounded by ``rpc_timeout``).
_PREFLIGHT_TIMEOUT = 5.0


def preflight_tls(
    address: str, setup: TLSSetup, timeout: float, abort: DialAbort | None = None
) -> bool:
    """One TLS handshake to ``address`` with ``setup``; raise if it fails for a TLS reason.

    Sends the HTTP/2 preface and waits for the first bytes back, so that a TLS 1.3
    server's verdict on the client certificate (an alert after the handshake) is seen.
    Anything that is not a TLS failure (refused, unreachable, timed out, closed without
    a TLS error) is left to gRPC and its retries: the pre-flight then returns quietly.

    Args:
        address: ``host:port`` of the broker.
        setup: The client's TLS set-up (the same context as its other connections).
        timeout: Seconds for the pre-flight: the name lookup and each connect may
            take this long, the handshake and the answer what is left of it.
        abort: Abandons the name lookup, the connect, the handshake and the wait for the
            answer from another thread.

    Returns:
        False if it ran out of time before a verdict, else True.

    Raises:
        ClientClosedError: ``abort`` aborted.
        TLSError: naming the cause (missing or rejected client certificate, untrusted
            server certificate, strict X.509 verification, name mismatch, plaintext
            server).
        ConfigurationError: the TLS options' certificates do not load.
        LocalResourceError: the process has no file descriptor left for the socket.
    """
    host, port = parse_address(address)
    context = setup.context()
    deadline = time.monotonic() + timeout

    def left() -> float:
        # A step that finds nothing left times out at once (an OSError: returns quietly).
        return max(deadline - time.monotonic(), 0.001)

    try:
        raw = connect(host, port, timeout, abort)
    except TimeoutError:
        return False
    except OSError:
        return True  # not a TLS problem; gRPC reports and retries it
    with contextlib.closing(raw):
        try:
            raw.settimeout(left())
            with context.wrap_socket(
                raw, server_hostname=setup.server_hostname(host), do_handshake_on_connect=False
            ) as conn:
                with watching(abort, conn):
                    conn.do_handshake()
                try:
                    conn.settimeout(left())
                    conn.sendall(_H2_PREFACE)
                except OSError:
                    # A broker that refused us may have sent its alert and closed before
                    # the preface went out: the alert still waits to be read.
                    pass
                conn.settimeout(left())
                with watching(abort, conn):
                    conn.recv(64)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            return True  # closed without a TLS verdict (e.g. a broker shutting down)
        except ssl.SSLError as exc:
            issuer = None
            if isinstance(exc, ssl.SSLCertVerificationError):
                issuer = peer_issuer(host, port, setup.server_hostname(host), left(), abort)
            raise error_from_tls_exception(
                address,
                exc,
                strict=bool(context.verify_flags & ssl.VERIFY_X509_STRICT),
                system_roots=setup.options.ca_cert is None,
                issuer=issuer,
            ) from None
        except TimeoutError:
            return False
        except OSError:
            return True
    return True


class _Entry:
    """One channel, its stub, and the calls made on it that have not ended yet."""

    __slots__ = ("address", "calls", "channel", "retired", "stub")

    def __init__(self, address: str, channel: grpc.Channel) -> None:
        self.address = address
        self.channel = channel
        self.stub = Stub(channel)  # type: ignore[no-untyped-call]
        self.calls = 0
        #: No longer handed out (its broker left the cluster): closed by its last release.
        self.retired = False


class ChannelPool:
    """Lazily created gRPC channels and stubs keyed by ``host:port``.

    With TLS, the first channel to each broker is created only after a
    :func:`preflight_tls` to it passed (or was inconclusive).

    Each :meth:`stub` or :meth:`channel` counts as a call in progress on its channel
    until it is given back with :meth:`release` (or :meth:`release_later`), so that
    :meth:`retire` can close the channels of brokers that left the cluster without
    ending a call under way on one.

    Thread-safe.
    """

    def __init__(
        self,
        options: ClientOptions,
        *,
        channel_factory: Callable[[str, list[tuple[str, Any]]], grpc.Channel] | None = None,
    ) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._stubs: dict[tuple[str, bool], _Entry] = {}
        #: Retired channels with calls still under way on them.
        self._retired: list[_Entry] = []
        #: Handles given back by release_later() (a finalizer, which must take no lock):
        #: released by the next operation that takes the lock.
        self._deferred: collections.deque[object] = collections.deque()
        self._closed = False
        self._forked = False
        self._used = False
        self._factory = channel_factory or self._make_channel
        self._checked: set[str] = set()
        #: Abandons the TLS questions of unary calls (see :meth:`stub`) at :meth:`close`.
        self.closing = DialAbort()
        #: The client's one TLS set-up, also used by the ``"h2"`` dials.
        self.tls = TLSSetup(options.tls) if options.tls is not None else None

    def _channel_options(self, streaming_reads: bool) -> list[tuple[str, Any]]:
        merged = dict(_BASE_OPTIONS)
        merged["grpc.max_receive_message_length"] = self._options.max_receive_message_size
        interval = self._options.keepalive_interval
        if interval is not None:
            merged["grpc.keepalive_time_ms"] = int(interval * 1000)
            merged["grpc.keepalive_timeout_ms"] = int(self._options.keepalive_timeout * 1000)
        if streaming_reads:
            merged[grpc.experimental.ChannelOptions.SingleThreadedUnaryStream] = 1
        tls = self._options.tls
        if tls is not None and tls.server_name:
            merged["grpc.ssl_target_name_override"] = tls.server_name
            merged["grpc.default_authority"] = tls.server_name
        merged.update(dict(self._options.grpc_options))
        # grpcio enables single-threaded reads by the option's mere presence; a falsy
        # value in grpc_options is taken as "off" and removes it.
        single = grpc.experimental.ChannelOptions.SingleThreadedUnaryStream
        if single in merged and not merged[single]:
            del merged[single]
        return list(merged.items())

    def _make_channel(self, address: str, channel_options: list[tuple[str, Any]]) -> grpc.Channel:
        if self.tls is None:
            return grpc.insecure_channel(address, options=channel_options)
        return grpc.secure_channel(address, self.tls.channel_credentials(), options=channel_options)

    def addresses(self) -> tuple[str, ...]:
        """The brokers this pool has an open channel to, sorted (retired channels whose
        calls have not ended yet included)."""
        with self._lock:
            idle = self._release_deferred()
            held = {address for address, _ in self._stubs}
            held.update(entry.address for entry in self._retired)
        _close_all(idle)
        return tuple(sorted(held))

    def _acquire(self, address: str, streaming_reads: bool, budget: float | None) -> _Entry:
        if self._forked:
            raise ForkedClientError(
                "this object was created before the process forked and uses the parent's "
                "connections; the Client itself reconnects in the child: call it again"
            )
        key = (address, streaming_reads)
        if key not in self._stubs:
            self.check_tls(address, budget, self.closing)
        with self._lock:
            if self._closed:
                raise ClientClosedError("client is closed")
            idle = self._release_deferred()
            entry = self._stubs.get(key)
            if entry is None:
                channel = self._factory(address, self._channel_options(streaming_reads))
                entry = _Entry(address, channel)
                self._stubs[key] = entry
                self._used = True
            # Counted under the lock: retire() then either sees the call or has already
            # taken the channel out of the pool (and this made a new one).
            entry.calls += 1
        _close_all(idle)
        return entry

    def stub(
        self, address: str, *, streaming_reads: bool = False, budget: float | None = None
    ) -> Stub:
        """The stub for ``address``, creating its channel on first use.

        Counts as a call in progress on the channel until :meth:`release` is given the
        stub (a stub never released only keeps its channel open until :meth:`close`).

        Args:
            address: ``host:port`` of a broker.
            streaming_reads: The channel for ``Subscribe`` (single-threaded reads).
            budget: Seconds the caller's call has in all: bounds the TLS pre-flight
                (:meth:`check_tls`) too.

        Raises:
            ClientClosedError: after :meth:`close`, or when it cut the pre-flight short.
        """
        return self._acquire(address, streaming_reads, budget).stub

    @property
    def opened(self) -> bool:
        """Whether a channel was made (and not closed since)."""
        return bool(self._stubs) or bool(self._retired)

    def channel(self, address: str) -> grpc.Channel:
        """The channel of :meth:`stub` for ``address`` (for a call made without the
        stub's serializers); counts as a call in progress until :meth:`release` is given
        the channel.

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        return self._acquire(address, False, None).channel

    def release(self, handle: object) -> None:
        """End the call that took ``handle`` (a stub or channel of :meth:`stub` or
        :meth:`channel`); the last call on a retired channel closes it. A handle this
        pool no longer holds (closed) is ignored."""
        with self._lock:
            idle = self._release_deferred()
            entry = self._release_locked(handle)
            if entry is not None:
                idle.append(entry)
        _close_all(idle)

    def release_later(self, handle: object) -> None:
        """:meth:`release` ``handle`` at the next operation on this pool that takes its
        lock (any call made, a metadata refresh, :meth:`addresses`, the client's timer
        thread's look while a retired channel is in use: :meth:`release_deferred`).

        For a finalizer: takes no lock (the garbage collector may run it on a thread
        that holds this pool's lock, which is not reentrant) and closes nothing.
        """
        self._deferred.append(handle)  # atomic: no lock needed

    def release_deferred(self) -> None:
        """Release now what :meth:`release_later` was given, closing the retired channels
        whose last call that was (the timer thread's look for a client that makes no
        more calls: see :meth:`.BrokerRoster.forget_departed`)."""
        with self._lock:
            idle = self._release_deferred()
        _close_all(idle)

    @property
    def retired_in_use(self) -> bool:
        """Whether a retired channel is kept open by a call not given back yet."""
        return bool(self._retired)

    def _release_deferred(self) -> list[_Entry]:
        """Release what :meth:`release_later` was given (under the lock); returns the
        retired channels whose last call that was, to be closed outside the lock."""
        idle: list[_Entry] = []
        deferred = self._deferred
        while deferred:
            entry = self._release_locked(deferred.popleft())
            if entry is not None:
                idle.append(entry)
        return idle

    def _release_locked(self, handle: object) -> _Entry | None:
        """Count one call on ``handle``'s channel as ended (under the lock); returns the
        channel if it was retired and that was its last call (taken out: to be closed)."""
        entry = next(
            (
                e
                for e in (*self._stubs.values(), *self._retired)
                if e.stub is handle or e.channel is handle
            ),
            None,
        )
        if entry is None or entry.calls == 0:
            return None
        entry.calls -= 1
        if not entry.retired or entry.calls:
            return None
        self._retired.remove(entry)
        return entry

    def releaser(self, handle: object) -> Releaser:
        """A :class:`Releaser` of ``handle``: releases it on its first use only (for a
        call that ends in one of several ways, on several threads)."""
        return Releaser(self, handle)

    def retire(self, keep: Collection[str]) -> list[str]:
        """Stop using the channels to addresses not in ``keep`` (brokers that left the
        cluster): each is closed now if no call is under way on it, else by the
        :meth:`release` of its last call. A later :meth:`stub` for such an address opens
        a new channel.

        grpcio's ``Channel.close()`` ends every call in progress on the channel
        (CANCELLED), so a channel in use is never closed here: a publish stream or a
        subscription on a broker that was only left out of one metadata answer (a v1.9.0
        server lists only the peers that answered its survey in time) goes on.

        Returns:
            The addresses taken out of the pool, sorted.
        """
        gone: set[str] = set()
        with self._lock:
            if self._closed:
                return []
            idle = self._release_deferred()
            for key in [key for key in self._stubs if key[0] not in keep]:
                entry = self._stubs.pop(key)
                gone.add(key[0])
                if entry.calls:
                    entry.retired = True
                    self._retired.append(entry)
                else:
                    idle.append(entry)
            # A broker coming back at the address is checked again (and the set of
            # addresses seen does not grow for ever under rolling replacements).
            self._checked.difference_update(gone)
        _close_all(idle)
        return sorted(gone)

    def check_tls(
        self, address: str, budget: float | None = None, abort: DialAbort | None = None
    ) -> None:
        """Run :func:`preflight_tls` once per broker (outside the lock: it does I/O).

        Called before the first channel to ``address`` is made; the transports that
        open their own sockets (the ``"h2"`` publish stream and subscriptions) call it
        too. Without TLS,
        or once the broker passed, it returns at once. It takes ``rpc_timeout`` (5 s at
        most) or the caller's ``budget``, whichever is shorter; ``abort`` ends it at
        once (see :func:`preflight_tls`).

        Raises:
            ClientClosedError: ``abort`` aborted.
            TLSError: the handshake failed for a TLS reason (checked again next time).
            ConfigurationError: the TLS options' certificates do not load.
            LocalResourceError: the process has no file descriptor left for the socket.
        """
        setup = self.tls
        if setup is None or address in self._checked or self._factory != self._make_channel:
            return
        timeout = min(self._options.rpc_timeout, _PREFLIGHT_TIMEOUT)
        if budget is not None:
            timeout = min(timeout, budget)
        if not preflight_tls(address, setup, timeout, abort) and budget is not None:
            return  # cut short by the caller's budget: asked again next time
        with self._lock:
            self._checked.add(address)

    @property
    def connected(self) -> bool:
        """Whether any channel was ever created."""
        return self._used

    def abandon_after_fork(self) -> None:
        """In a forked child: refuse further use, leaving the parent's channels alone.

        Takes no lock (a parent thread may have held it at fork time) and closes nothing
        (the channels belong to the parent's gRPC runtime).
        """
        self._forked = True

    def close(self) -> None:
        """Close every channel, and cut short the TLS questions of calls about to make
        one (:attr:`closing`); idempotent."""
        with self._lock:
            self._closed = True
            entries = [*self._stubs.values(), *self._retired]
            self._stubs.clear()
            self._retired.clear()
            self._deferred.clear()
        # A pre-flight waits up to 5 s for a broker that says nothing, and the TLS
        # question of a refused connection 2 s: a caller's thread then outlived close().
        self.closing.abort()
        _close_all(entries)


class Releaser:
    """Gives a call's handle back to its :class:`ChannelPool` once, however many times
    and on whichever threads the call's ends ask (a read that ended, a cancel).

    Thread-safe, and takes no lock to decide which use is the first: :meth:`later` may
    be called from a finalizer.
    """

    __slots__ = ("_handle", "_pending", "_pool")

    def __init__(self, pool: ChannelPool, handle: object) -> None:
        self._pool = pool
        self._handle = handle
        #: One token; taking it (list.pop, atomic) is the first use.
        self._pending = [True]

    def _take(self) -> bool:
        try:
            self._pending.pop()
        except IndexError:
            return False
        return True

    def __call__(self) -> None:
        """Release the handle now, if not done yet."""
        if self._take():
            self._pool.release(self._handle)

    def later(self) -> None:
        """Release the handle at the pool's next operation, if not done yet (takes no
        lock; see :meth:`ChannelPool.release_later`)."""
        if self._take():
            self._pool.release_later(self._handle)


def _close_all(entries: list[_Entry]) -> None:
    """Close the channels of ``entries`` (outside the pool's lock)."""
    for entry in entries:
        entry.channel.close()
