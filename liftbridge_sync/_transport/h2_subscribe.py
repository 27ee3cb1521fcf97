"""``Subscribe`` over our own HTTP/2 framing, read on the caller's thread.

grpcio's single-threaded streaming reads still cost about 5-7 µs of Python per message
(five lock pairs, a condition notify and an event object in ``grpc._channel`` for every
``next()``; bench/RESULTS.md). This reader owns one TCP (or TLS) connection per call and
does the work in bulk: one blocking ``recv()`` of up to 120 KiB, then every whole gRPC
message in it is decoded in one loop and handed out one by one from a list. There is no
I/O thread: the thread iterating the subscription does the reads, exactly as with
grpcio's ``SingleThreadedUnaryStream``.

The HTTP/2 state machine (preface, SETTINGS, PING, GOAWAY, RST_STREAM, HPACK) is the
``h2`` package; plain DATA frames of our stream are taken out of the byte stream before
``h2`` sees them (``h2`` spends ~10 µs of pure Python per frame, and the broker sends one
DATA frame per message) and their flow-control window is returned with our own
WINDOW_UPDATE frames.

The call is a :class:`~liftbridge_sync._transport.opening.SubscribeCall`: ``next()``
returns the next wire ``Message``, raises ``StopIteration`` when the server ends the
stream with OK and the :class:`~liftbridge_sync.errors.LiftbridgeError` of its status
otherwise; ``cancel()`` from any thread ends a blocked ``next()`` with ``CANCELLED``.
Connection failures are ``UNAVAILABLE``, so the subscription resubscribes after the last
delivered offset as it does on grpcio.

This module is the call's connection: dialing, the request, ``recv()`` with keepalive
PINGs, writes and cancellation. What is done with the received bytes (frames, messages,
the stream's end) is :mod:`liftbridge_sync._transport.h2.subscribe_receiver`'s.
Thread-safe as :class:`H2SubscribeCall` says.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections.abc import Callable

import grpc
import h2.exceptions

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.h2.dial import DialError, dial
from liftbridge_sync._transport.h2.framing import FrameError
from liftbridge_sync._transport.h2.limits import max_message_size
from liftbridge_sync._transport.h2.pings import PingPolicy
from liftbridge_sync._transport.h2.sockets import RECV_SIZE
from liftbridge_sync._transport.h2.subscribe_receiver import SubscribeReceiver
from liftbridge_sync._transport.tls import TLSSetup
from liftbridge_sync.errors import ClientClosedError, LiftbridgeError, LocalResourceError
from liftbridge_sync.options import ClientOptions

__all__ = ["H2SubscribeCall"]

_SC = grpc.StatusCode
_PATH = b"/proto.API/Subscribe"
#: Seconds added to the PING spacing the broker enforces: it measures the spacing at its
#: end, where a PING delayed less than the one before arrives that much sooner.
_PING_SLACK = 1.0
#: Our receive window (stream and connection). A consumer that stops iterating stops
#: reading, so at most this much is buffered before the broker has to wait.
_RECV_WINDOW = 4 << 20


class _DeadConnection(Exception):
    """A keepalive PING went unanswered."""


#: The shortest a read with a deadline waits for bytes: ``read_batch(deadline)`` with the
#: deadline already past still takes what the kernel has received (``get(0)``).
_LEAST_WAIT = 0.001


class H2SubscribeCall(SubscribeReceiver):
    """One ``Subscribe`` call on its own HTTP/2 connection, read by the iterating thread.

    Nothing happens on construction; the first ``next()`` runs the TLS pre-flight (if
    given), connects and sends the request, all within one ``rpc_timeout``. ``cancel()``
    abandons any of these steps at once, as the wait for the broker's first frame. The
    socket is closed when the call ends, when it is cancelled, or when the object is
    collected.

    Args:
        address: ``host:port`` of the broker.
        request: The request to send.
        options: The client's options.
        tls: The client's TLS set-up; ``None`` builds one from ``options.tls``.
        preflight: Run before the first connect with the call's
            :class:`~liftbridge_sync._transport.aborting.DialAbort` (the client's TLS
            pre-flight, :meth:`~liftbridge_sync._transport.channels.ChannelPool.check_tls`,
            which takes ``rpc_timeout`` at most): its time counts against the
            connect's ``rpc_timeout``, ``cancel()`` ends it too, and what it raises
            (``TLSError``) is raised.

    ``next()`` must be called by one thread at a time; ``cancel()`` is thread-safe.
    """

    #: Whether the reader takes messages with :meth:`read_batch` (set by the opener).
    batched = True

    def __init__(
        self,
        address: str,
        request: api_pb2.SubscribeRequest,
        options: ClientOptions,
        tls: TLSSetup | None = None,
        preflight: Callable[[DialAbort], None] | None = None,
    ):
        self._address = address
        self._request = request
        self._options = options
        # The client's own TLS set-up (one per client); a stand-alone call builds one.
        if tls is None and options.tls is not None:
            tls = TLSSetup(options.tls)
        self._tls = tls
        super().__init__(max_message_size(options))
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._cancelled = False
        self._preflight = preflight
        #: Abandons the dial (pre-flight, connect, TLS handshake) from cancel(): a
        #: blocked step returns once its socket is shut down, it looks at no flag.
        self._abort = DialAbort()
        #: The iterating thread may be inside recv() or send(): cancel() wakes it with
        #: shutdown() (on Linux, close() alone wakes neither), and it closes the socket.
        self._in_io = False
        #: When a keepalive PING may go out on the call's one connection.
        self._pings = _ping_policy(options)
        #: When the keepalive PING now unanswered went out (kept across reads: a read
        #: that ends at its deadline leaves the PING's answer to the next one).
        self._pinged_at: float | None = None
        #: When the connection was opened or last brought bytes: silence is measured
        #: from here, across reads that end at their deadlines (``get(timeout)``).
        self._heard_at = 0.0

    # ------------------------------------------------------------------ grpcio-like API

    def __iter__(self) -> H2SubscribeCall:
        return self

    def __next__(self) -> api_pb2.Message:
        ready = self._ready
        i = self._next
        if i < len(ready):
            self._next = i + 1
            return ready[i]
        return self._fill()

    def read_batch(self, deadline: float | None = None) -> list[api_pb2.Message]:
        """Every decoded message not handed out yet, reading until there is at least one.

        Args:
            deadline: ``time.monotonic()`` by which to give up waiting (``None``: no
                limit). The call stays open and usable: a later read goes on.

        Raises:
            TimeoutError: no message arrived by ``deadline``.
            StopIteration: the server ended the stream with OK.
            LiftbridgeError: the stream failed or was cancelled, after every message
                received before that was handed out.
        """
        ready = self._ready
        i = self._next
        if i >= len(ready):
            self._fill(deadline)
            ready = self._ready
            i = 0
        self._ready = []
        self._next = 0
        return ready[i:] if i else ready

    def cancel(self) -> None:
        """End the call; a blocked ``next()`` raises CANCELLED. Idempotent."""
        self._abort.abort()  # a dial under way (the reader is not in recv() yet)
        with self._lock:
            self._cancelled = True
            sock = self._sock
            if sock is None:
                return
            if self._in_io:
                # Wake the reader or writer (it closes the socket); only the fd is
                # touched, never the TLS object it is using.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
            else:
                self._sock = None
                sock.close()

    def __del__(self) -> None:
        sock = self._sock
        if sock is not None:
            self._sock = None
            with contextlib.suppress(Exception):
                sock.close()

    # ------------------------------------------------------------------ reading

    def _fill(self, deadline: float | None = None) -> api_pb2.Message:
        """Read until a message is decoded or the stream ends (or ``deadline``)."""
        self._ready = []
        self._next = 0
        while True:
            if self._ended:
                self._close()
                if self._error is not None:
                    raise self._error
                raise StopIteration
            if self._conn is None:
                self._connect()
            data = self._recv(deadline)
            try:
                self._receive(data)
            except h2.exceptions.ProtocolError as exc:
                self._end(_SC.UNAVAILABLE, f"HTTP/2 protocol error: {exc!r}")
            except FrameError as exc:
                self._end(_SC.UNAVAILABLE, f"HTTP/2 framing error: {exc}")
            if self._outbuf:
                self._send_out()
            ready = self._ready
            if ready:
                self._next = 1
                self._received = True
                self._pings.data_received()
                return ready[0]

    def _recv(self, deadline: float | None = None) -> bytes:
        with self._lock:
            sock = self._sock
            if self._cancelled or sock is None:
                raise self._cancelled_error()
            self._in_io = True
        past_deadline = False
        try:
            data = self._recv_alive(sock, deadline)
        except _PastDeadline:
            data = b""
            failure = ""
            past_deadline = True
        except _DeadConnection as exc:
            data = b""
            failure = str(exc)
        except OSError as exc:
            data = b""
            failure = f"receive from {self._address} failed: {exc}"
        except BaseException:
            # Interrupted (KeyboardInterrupt): the socket is no longer in use, so
            # cancel() closes it instead of waking a reader that has gone.
            with self._lock:
                self._in_io = False
            raise
        else:
            failure = f"{self._address} closed the connection"
        with self._lock:
            self._in_io = False
            if self._cancelled:
                self._sock = None
                sock.close()
                raise self._cancelled_error()
        if past_deadline:  # the call stays open: a later read goes on
            raise TimeoutError("no message arrived by the deadline")
        if not data:
            self._close()
            raise self._fail(_SC.UNAVAILABLE, failure)
        return data

    def _recv_alive(self, sock: socket.socket, deadline: float | None = None) -> bytes:
        """One ``recv()``, PINGing a connection that stays silent (keepalive).

        An idle stream is legitimate (nothing is published), so silence alone ends
        nothing: a PING goes out, and if nothing at all arrives within
        ``keepalive_timeout`` after it, the connection is dead (a crashed host, a
        stopped broker, a black-holing firewall): the subscription resubscribes.

        When PINGs go out is the broker's policy (:class:`PingPolicy`). The first PING
        of a connection, and the first after messages, cost no strike: they go out
        after ``keepalive_interval`` or half of ``keepalive_timeout`` of silence,
        whichever is sooner, so a broker that stops while it was sending is noticed
        within 1.5 times ``keepalive_timeout`` (30 s by default). On a stream that stays
        silent the next ones are ``keepalive_interval`` but at least the broker's
        minimum apart (grpc-go's 5 minutes, or ``grpc.http2.min_time_between_pings_ms``),
        so it never earns a GOAWAY ``too_many_pings``.

        Raises:
            _PastDeadline: nothing arrived by ``deadline``.
            _DeadConnection: no sign of life after a PING.
            OSError: the socket failed (or was closed by ``cancel``).
        """
        interval = self._options.keepalive_interval
        if interval is None:
            return _recv_by(sock, None, deadline)
        while True:
            pinged_at = self._pinged_at
            if pinged_at is None:
                allowed = self._pings.next_allowed()  # inf: not until the broker sends
                heard = self._heard_at
                if allowed == -math.inf:  # a free PING: the broker sent since the last
                    wait = heard + min(interval, self._options.keepalive_timeout / 2)
                elif allowed == math.inf:
                    wait = None
                else:
                    wait = max(heard + interval, allowed)
                if wait is not None:
                    wait -= time.monotonic()
            else:
                wait = pinged_at + self._options.keepalive_timeout - time.monotonic()
            try:
                data = _recv_by(sock, wait, deadline)
            except TimeoutError:
                if pinged_at is not None:
                    raise _DeadConnection(
                        f"{self._address} did not answer a keepalive PING within "
                        f"{self._options.keepalive_timeout}s: the connection is dead"
                    ) from None
            else:
                self._pinged_at = None  # any bytes are a sign of life
                self._heard_at = time.monotonic()
                return data
            conn = self._conn
            if conn is None:
                raise _DeadConnection(f"{self._address}: no HTTP/2 connection")
            conn.ping(b"lb-alive")
            sock.settimeout(self._options.keepalive_timeout)
            sock.sendall(conn.data_to_send())
            self._pings.pinged()
            self._pinged_at = time.monotonic()

    def _cancelled_error(self) -> LiftbridgeError:
        return self._fail(_SC.CANCELLED, "subscription call cancelled")

    def _send_out(self) -> None:
        """Write the queued frames, for at most ``keepalive_timeout`` seconds: a broker
        that stopped reading fails the call (UNAVAILABLE: the subscription resubscribes)
        instead of hanging it, and ``cancel()`` wakes this write at once."""
        data = bytes(self._outbuf)
        self._outbuf.clear()
        with self._lock:
            sock = self._sock
            cancelled = self._cancelled
            if sock is not None and not cancelled:
                self._in_io = True
        if sock is None:
            return
        if cancelled:  # closed under us by cancel() (a get() timeout, close())
            if not self._ended:
                self._cancelled_error()
            return
        bound = self._options.keepalive_timeout
        try:
            sock.settimeout(bound)
            sock.sendall(data)
            sock.settimeout(None)
            failure = None
        except TimeoutError:
            failure = (
                f"{self._address} took none of our last {len(data)} bytes within {bound:g}s "
                "(keepalive_timeout): the broker stopped reading"
            )
        except OSError as exc:
            failure = f"send to {self._address} failed: {exc}"
        except BaseException:
            with self._lock:  # interrupted: see _recv
                self._in_io = False
            raise
        with self._lock:
            self._in_io = False
            cancelled = self._cancelled
            if cancelled and self._sock is sock:
                self._sock = None
                sock.close()
        if failure is None or self._ended:
            return
        if cancelled:
            # cancel() woke or closed the socket under us (a get() timeout, close()):
            # that is our own CANCELLED, not a broker failure worth a resubscribe.
            self._cancelled_error()
        else:
            self._end(_SC.UNAVAILABLE, failure)

    def _close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    # ------------------------------------------------------------------ connecting

    def _connect(self) -> None:
        if self._cancelled:
            raise self._cancelled_error()
        body = self._request.SerializeToString()
        rpc_timeout = self._options.rpc_timeout
        # One bound for the pre-flight and the dial (as the publish stream's): the dial
        # starting a bound of its own after it, a broker that accepts and never answers
        # TLS held the first read for both.
        deadline = time.monotonic() + rpc_timeout
        try:
            # cancel() (a get() deadline, close()) ends a step left waiting at once.
            if self._preflight is not None:
                self._preflight(self._abort)
                if time.monotonic() >= deadline:
                    raise DialError(
                        f"cannot open a stream to {self._address}: the TLS pre-flight took "
                        f"all of the dial's {rpc_timeout:g}s (rpc_timeout, for all its steps)"
                    )
            sock, conn, sid = dial(
                self._address,
                self._options,
                self._tls,
                _PATH,
                _RECV_WINDOW,
                body,
                abort=self._abort,
                deadline=deadline,
            )
        except ClientClosedError:  # our own cancel() abandoned the dial
            raise self._cancelled_error() from None
        except LocalResourceError as exc:
            # This process's shortage, not the broker's: it ends the call, unretried.
            self._ended = True
            self._error = exc
            raise
        except DialError as exc:
            if self._cancelled:
                raise self._cancelled_error() from None
            raise self._fail(_SC.UNAVAILABLE, str(exc)) from None
        sock.settimeout(None)
        with self._lock:
            if self._cancelled:
                sock.close()
                raise self._cancelled_error()
            self._sock = sock
        self._heard_at = time.monotonic()
        self._attach(conn, sid)


def _ping_policy(options: ClientOptions) -> PingPolicy:
    """The keepalive PING spacing a broker accepts on a subscription's connection.

    Unlike a publish connection (which stops after ``max_pings_without_data``), a silent
    subscription keeps PINGing at the broker's minimum spacing by default: a dead
    connection under a stream that stays quiet must still be noticed.
    """
    grpc_options = dict(options.grpc_options)
    asked = PingPolicy.from_grpc_options(grpc_options)
    limit = grpc_options.get("grpc.http2.max_pings_without_data")
    return PingPolicy(
        asked.min_interval + _PING_SLACK,
        asked.max_without_data if isinstance(limit, int) and not isinstance(limit, bool) else 0,
    )


#: Longest single blocking ``recv()`` on the main thread, seconds (see :func:`_recv_within`).
_SIGNAL_SLICE = 1.0


class _PastDeadline(Exception):
    """A read's deadline passed with nothing received (not a socket failure)."""


def _recv_by(sock: socket.socket, wait: float | None, deadline: float | None) -> bytes:
    """:func:`_recv_within` ``wait`` seconds, or until ``deadline`` if that comes first
    (then ``_PastDeadline``). At least :data:`_LEAST_WAIT` is waited either way: a
    socket timeout of 0 would make ``recv()`` non-blocking, with another error."""
    if wait is not None:
        wait = max(wait, _LEAST_WAIT)
    if deadline is None:
        return _recv_within(sock, wait)
    left = max(deadline - time.monotonic(), _LEAST_WAIT)
    if wait is not None and wait <= left:
        return _recv_within(sock, wait)
    try:
        return _recv_within(sock, left)
    except TimeoutError:
        raise _PastDeadline from None


def _recv_within(sock: socket.socket, wait: float | None) -> bytes:
    """``sock.recv()``, raising ``TimeoutError`` after ``wait`` seconds (``None``: never).

    On the main thread the wait is cut into slices of at most :data:`_SIGNAL_SLICE`: the
    kernel may deliver a SIGINT to another thread (the client's timer, grpc's), and then
    nothing interrupts the main thread's ``recv()``, so Ctrl-C on a quiet ``--follow``
    would wait for the next message or keepalive (up to 300 s). Between slices Python runs
    the pending signal handler, so ``KeyboardInterrupt`` comes within a second.
    """
    if threading.current_thread() is not threading.main_thread():
        sock.settimeout(wait)
        return sock.recv(RECV_SIZE)
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        step = _SIGNAL_SLICE
        if deadline is not None:
            step = min(step, deadline - time.monotonic())
            if step <= 0:
                raise TimeoutError("timed out")
        sock.settimeout(step)
        try:
            return sock.recv(RECV_SIZE)
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
