"""``PublishAsync`` over our own HTTP/2 connection (the default ``"h2"`` publish transport).

grpcio's public API writes one HTTP/2 DATA frame with one syscall per message and hands
every message across several threads (performance.md §4, §10). This transport owns the
connection instead: callers append framed requests to a list under a short lock, and
one I/O thread, woken only on the idle → busy transition, writes everything pending
with as few DATA frames as flow control allows and one ``send()``; a caller about to
wait for its answer writes itself when the I/O thread is idle, and so does a caller in
front of whom 16 KiB wait (a loop of ``publish_async`` holds the GIL, and the I/O thread
could wait a switch interval for it). With the C speedups, socket calls on plaintext
connections keep the GIL, so whoever holds the I/O lock never waits for the GIL.
Responses are decoded in bulk from each ``recv()`` by
:class:`~.responses.ResponseReader`; while the acks of many pipelined publishes are
due, the I/O thread sleeps until all their bytes could be there or ``ack_read_delay``
has passed (:mod:`.gathering`), so a burst of acks costs one or two wake-ups rather than
one per TCP segment. ``h2`` keeps outbound flow control and the connection-level
frames. The stream composes the rest: a :class:`~.writing.Writer` is the callers' side
(queueing, writing on the caller's thread, and combining the next requests of the
callers one hand-over woke into one ``send()``); :class:`~.reading.CallerReads` lets a
``publish()`` caller read its own ack while the I/O thread steps aside; :mod:`.dial`
opens the connection.

Dead peers: a PING goes out when the publisher asks (``probe()``,
:meth:`~.writing.Writer.probe`, after an ack timeout) and, with
``grpc.keepalive_time_ms`` in ``grpc_options``, after that long without reading
anything; nothing read within ``grpc.keepalive_timeout_ms`` (default 20 s) after it ends
the connection as unavailable, so the publisher reconnects.
The socket's ``TCP_USER_TIMEOUT`` (``keepalive_timeout``, set by :mod:`.dial`) fails it
when our data stays unacknowledged, or the broker's window shut, that long.

Misbehaving brokers: the output the socket has not taken is capped (:mod:`.limits`), so
a broker that asks for PING or SETTINGS answers faster than it reads them ends the
connection (``GOAWAY(ENHANCE_YOUR_CALM)``, a retryable error) instead of growing it.

Either PING goes out only as often as the broker's grpc-go keepalive enforcement
allows (:mod:`.pings`); a probe that would come too soon is skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable

import grpc
import h2.connection
import h2.exceptions

from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.h2.framing import (
    MAX_MESSAGE_SIZE,
    FrameError,
    ping_frame,
)
from liftbridge_sync._transport.h2.gathering import AckGathering
from liftbridge_sync._transport.h2.limits import OUTPUT_CAP
from liftbridge_sync._transport.h2.outbound_queue import OutboundQueue, OutboundQueueType
from liftbridge_sync._transport.h2.pings import PingPolicy
from liftbridge_sync._transport.h2.reading import CallerReads
from liftbridge_sync._transport.h2.responses import ResponseReader, unavailable
from liftbridge_sync._transport.h2.sockets import (
    READS_PER_TURN,
    RECV_SIZE,
    ConnectionLost,
    SocketCalls,
    speaks_tls,
)
from liftbridge_sync._transport.h2.stalls import StallWatch
from liftbridge_sync._transport.h2.writing import COMBINE_WAIT, WRITE_HERE_AT, SocketWatch, Writer
from liftbridge_sync._transport.publish_stream import (
    StreamClosed,
    StreamDraining,
    StreamEvent,
    StreamResponse,
    StreamResponses,
)
from liftbridge_sync._wire.publish_codec import Answer
from liftbridge_sync._wire.status import CallContext, error_from_status, plaintext_refused_error
from liftbridge_sync.errors import ClientClosedError, LiftbridgeError

__all__ = ["H2PublishStream"]

_log = logging.getLogger("liftbridge_sync.transport")

#: Our receive window (stream and connection): acks are small, so this is only about
#: sending fewer WINDOW_UPDATE frames.
_RECV_WINDOW = 4 << 20


#: Seconds for each step (connect, handshake) of asking a port whose plaintext stream
#: died before any HTTP/2 frame whether it requires TLS.
TLS_QUESTION_WAIT = 2.0
_GO_ON = object()  # a loop turn that did not end the stream


class H2PublishStream:
    """One ``PublishAsync`` call on its own HTTP/2 connection.

    ``send_framed``, ``close``, ``cancel`` and ``probe`` only touch a list and a few
    flags under a short lock and wake the I/O thread (``liftbridge-publish-io``) when it
    is idle; that thread does all socket and HTTP/2 work and emits every event, ending
    with exactly one :class:`StreamClosed`.

    It composes a :class:`~.writing.Writer` (queueing and writing) and a
    :class:`~.reading.CallerReads` (a ``publish()`` caller reading its own ack), whose
    methods for callers (``send_framed``, ``send_many``, ``send``, ``nudge``,
    ``write_direct``, ``queued_mark``, ``written_through``, ``probe``, ``close`` and
    ``answer_here``) are bound here as its own: no call in between on the way of every
    publish. Thread-safe.
    """

    def __init__(
        self,
        sock: socket.socket,
        conn: h2.connection.H2Connection,
        stream_id: int,
        epoch: int,
        on_event: Callable[[StreamEvent], None],
        *,
        keepalive: tuple[float | None, float] = (None, 20.0),
        stall_bound: float | None = None,
        ack_read_delay: float | None = None,
        max_message: int = MAX_MESSAGE_SIZE,
        pings: PingPolicy | None = None,
        tls_abort: DialAbort | None = None,
    ) -> None:
        self._sock = sock
        #: Cuts short the "speaks TLS?" question of a stream that died (the publisher's
        #: close joins the I/O thread, and the question may take seconds).
        self._tls_abort = tls_abort
        self._conn = conn
        self._stream_id = stream_id
        self._epoch = epoch
        self._on_event = on_event
        self._tls = isinstance(sock, ssl.SSLSocket)
        #: Whether any bytes from the broker parsed as HTTP/2 (see _plaintext_refused).
        self._frames_ok = False
        self._peer: tuple[str, int] = sock.getpeername()[:2]
        self._ping_every, self._ping_wait = keepalive
        #: When a PING may go out at all (never a grpc-go "too_many_pings" GOAWAY).
        self._pings = pings or PingPolicy()

        # Shared with callers, guarded by the queue's lock: the outbound queue and its
        #: flags are an OutboundQueue (a C struct with the speedups, which the C fast
        #: path of ``Publisher.submit_value`` queues on), whose lock is the stream's lock.
        self.outbound: OutboundQueueType = OutboundQueue(WRITE_HERE_AT)
        self._out = self.outbound
        #: Held by whoever does socket and h2 work: the I/O thread between selects, or a
        #: caller writing directly (only ever acquired without blocking under the
        #: queue's lock) or reading its ack.
        self._io_lock = threading.Lock()
        self._cancel_requested = False  # under the queue's lock

        # Whoever holds the I/O lock.
        self._reader = ResponseReader(conn, stream_id, max_message)
        self._drain_told = False  # StreamDraining was emitted
        self._last_read = time.monotonic()
        self._ping_deadline: float | None = None  # a PING is out: read something by then
        self._ping_waited = self._ping_wait  # how long that PING is given
        self._stalls = StallWatch(stall_bound) if stall_bound is not None else None

        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sock.setblocking(False)
        self._calls = SocketCalls(sock, self._wake_r)
        self._selector = selectors.DefaultSelector()
        #: What the selector watches the socket for (and whether to read on at once).
        self._watch = SocketWatch(self._selector, sock)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        #: Responses read this turn, emitted once the I/O lock is released.
        self._arrived: list[Answer] = []
        #: Held from taking responses off ``_arrived`` (under the I/O lock) until they
        #: are handed over, so two readers hand theirs over in the order read.
        self._hand_over_lock = threading.Lock()
        #: How many bytes of acks the I/O thread waits for (see gathering).
        self._gathering = AckGathering(sock, ack_read_delay, self._out)
        self._gather_for: float | None = None  # the next wait's bound, if gathering
        self._writer = writer = Writer(
            self._out,
            self._io_lock,
            conn,
            stream_id,
            self._calls,
            self._wake_w,
            self._watch,
            self._gathering,
            epoch,
            on_event,
            self._ping,
        )
        self._reads = reads = CallerReads(
            sock,
            self._io_lock,
            self._out,
            writer,
            self._watch,
            self._gathering,
            self._reader,
            read=self._read,
            draining_untold=self._draining_untold,
            take_arrived=self._take_arrived,
            hand_over=self._hand_over,
        )
        # The callers' methods, bound once: no call in between on every publish.
        self.send = writer.send
        self.send_framed = writer.send_framed
        self.send_many = writer.send_many
        self.nudge = writer.nudge
        self.write_direct = writer.write_direct
        self.queued_mark = writer.queued_mark
        self.written_through = writer.written_through
        self.probe = writer.probe
        self.close = writer.close
        self.answer_here = reads.answer_here
        self._thread = threading.Thread(target=self._run, name="liftbridge-publish-io", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callers

    def cancel(self) -> None:
        """Reset the stream and drop the connection; :class:`StreamClosed` follows."""
        out = self._out
        with out:
            if out.done or self._cancel_requested:
                return
            self._cancel_requested = True
            if not out.signalled:
                self._writer.wake()

    def join(self, timeout: float | None) -> None:
        """Wait for the I/O thread to finish (no-op when called from it)."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ I/O thread

    def _plaintext_refused(self, detail: str) -> LiftbridgeError | None:
        """The error saying the broker requires TLS, when a plaintext connection died
        before any valid frame arrived and its port answers a TLS handshake: a TLSError
        only if that answer was verified, else a retryable hint (a restart race, or
        anyone on the path, must not make a passing failure permanent)."""
        if self._tls or self._frames_ok:
            return None
        try:
            verdict = speaks_tls(self._peer, TLS_QUESTION_WAIT, self._tls_abort)
        except ClientClosedError:
            return None  # the client is closing: the stream's own error stands
        if verdict is None:
            return None
        return plaintext_refused_error("publish", detail, verified=verdict == "verified")

    def _run(self) -> None:
        error: LiftbridgeError | None
        try:
            error = self._loop()
        except ConnectionLost as exc:
            error = self._plaintext_refused(str(exc)) or unavailable(str(exc) or "connection lost")
        except FrameError as exc:
            error = self._plaintext_refused(str(exc)) or unavailable(f"HTTP/2 framing error: {exc}")
        except h2.exceptions.ProtocolError as exc:
            error = self._plaintext_refused(repr(exc)) or unavailable(
                f"HTTP/2 protocol error: {exc!r}"
            )
        except Exception as exc:  # pragma: no cover - a bug must still end the stream
            _log.exception("publish I/O thread failed")
            error = unavailable(f"transport failure: {exc!r}")
        finally:
            with self._io_lock:
                arrived = self._take_arrived()
            if arrived:  # read before the connection failed: still answers
                try:
                    self._hand_over(arrived)
                except Exception:  # pragma: no cover - a bug must still end the stream
                    _log.exception("handing over the last responses failed")
            with self._io_lock:
                with self._out:
                    self._out.done = True
                # Its parts refer back to the stream only until now: then it is freed by
                # reference counting, with no cycle left to the collector.
                self._writer.finished()
                self._reads.finished()
                self._selector.close()
                self._sock.close()
                self._wake_r.close()
                self._wake_w.close()
        self._on_event(StreamClosed(self._epoch, error))

    def _timeout(self) -> float | None:
        """Seconds until the next keepalive step (``None``: none planned)."""
        if self._ping_deadline is not None:
            return max(0.0, self._ping_deadline - time.monotonic())
        wait = None
        if self._ping_every is not None:
            due = max(self._last_read + self._ping_every, self._pings.next_allowed())
            if due != float("inf"):
                wait = max(0.0, due - time.monotonic())
        if self._stalls is not None:
            look = self._stalls.wake_in()
            wait = look if wait is None else min(wait, look)
        return wait

    def _keepalive(self) -> None:
        now = time.monotonic()
        if self._ping_deadline is not None:
            if now >= self._ping_deadline:
                raise ConnectionLost(
                    f"no answer from the broker within {self._ping_waited:g}s of a PING"
                )
        elif self._ping_every is not None and now >= self._last_read + self._ping_every:
            self._ping()
        elif self._stalls is not None:
            wait = self._stalls.check(now, self._last_read, self._gathering.due)
            if wait is not None:
                self._ping(wait)

    def _ping(self, wait: float | None = None) -> None:
        if self._ping_deadline is None and self._pings.may_ping():
            self._writer.outbuf += ping_frame(os.urandom(8))
            self._ping_waited = self._ping_wait if wait is None else wait
            self._ping_deadline = time.monotonic() + self._ping_waited
            self._pings.pinged()

    def _loop(self) -> LiftbridgeError | None:
        select = self._selector.select
        sock = self._sock
        out = self._out
        watch = self._watch
        while True:
            timeout = self._timeout()
            gather_for = self._gather_for
            if gather_for is not None:
                timeout = gather_for if timeout is None else min(timeout, gather_for)
            if out.deferred or out.combining:
                timeout = COMBINE_WAIT if timeout is None else min(timeout, COMBINE_WAIT)
            if watch.more_to_read:
                timeout = 0.0
            events = select(timeout)
            if not events and out.combining and not out.deferred:
                # None of the callers woken came back within COMBINE_WAIT: stop waiting
                # for them. (While they keep coming back, more slowly than that with
                # many threads wanting the GIL, this turn only writes what they queued.)
                self._writer.stop_combining()
            with self._io_lock:
                result = self._step(events, sock)
                arrived = self._take_arrived()
            if arrived:
                self._hand_over(arrived)
            if result is not _GO_ON:
                return result  # type: ignore[return-value]

    def _take_arrived(self) -> list[Answer]:
        """Under the I/O lock: the responses read so far, with the hand-over lock
        taken when there are any (:meth:`_hand_over` releases it)."""
        arrived = self._arrived
        if arrived:
            self._hand_over_lock.acquire()
            self._arrived = []
        return arrived

    def _hand_over(self, responses: list[Answer], on_io_thread: bool = True) -> None:
        """Emit the responses read, outside the I/O lock and after this turn's writes:
        a ``publish()`` caller woken by its ack then finds the lock free and writes its
        next request itself, and nothing is left between its wake-up and our next
        poll (which releases the GIL it needs). ``on_io_thread``: called by the I/O
        thread, not by a caller reading here."""
        try:
            if len(responses) == 1:
                self._on_event(StreamResponse(self._epoch, responses[0]))
                return
            if self._gathering.awaited(len(responses)):
                # publish() callers are among those this wakes (see writing).
                self._writer.start_combining(len(responses), on_io_thread)
            self._on_event(StreamResponses(self._epoch, responses))
        finally:
            self._hand_over_lock.release()

    def _step(self, events: list[tuple[selectors.SelectorKey, int]], sock: socket.socket) -> object:
        """One loop turn under ``_io_lock``: the stream's end (error or ``None``) or
        ``_GO_ON``."""
        failed = self._reads.failed_here or self._writer.failed_here
        if failed is not None:
            raise failed
        watch = self._watch
        if watch.reading_here:
            self._reads.take_back_if_left()
            failed = self._reads.failed_here
            if failed is not None:
                raise failed
        for key, mask in events:
            if key.fileobj is sock:
                if mask & selectors.EVENT_READ:
                    self._read()
            else:
                self._calls.drain_wake_ups()
        if not events and self._gather_for is not None and not watch.reading_here:
            self._read()  # waited long enough for more acks: take what is there
        elif (
            watch.more_to_read
            and not watch.reading_here
            and not any(key.fileobj is sock for key, _ in events)
        ):
            self._read()  # the last turn stopped at its bound: read on
        if self._reader.ended:
            self._goodbye()
            return self._reader.error
        if self._reader.draining and not self._drain_told:
            # A graceful GOAWAY: the publisher moves new publishes to a new connection
            # and half-closes this stream, whose broker answers what it has and ends it.
            self._drain_told = True
            self._on_event(StreamDraining(self._epoch))
        if self._cancel_requested:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._conn.reset_stream(self._stream_id, 0x8)  # CANCEL
            self._goodbye()
            return error_from_status(
                grpc.StatusCode.CANCELLED, "publish stream cancelled", CallContext.GENERIC
            )
        if (
            self._ping_every is not None
            or self._ping_deadline is not None
            or self._stalls is not None
        ):
            self._keepalive()
        writer = self._writer
        writer.take_queue()
        writer.pump()
        writer.end_once_framed()
        writer.write_out()
        if writer.end_once_framed():  # framed only by write_out
            writer.flush()
        quiet = not writer.closing and writer.unsent_pos == len(writer.unsent) and not writer.outbuf
        self._gather_for = self._gathering.plan(quiet and not watch.reading_here)
        return _GO_ON

    def _draining_untold(self) -> bool:
        """While the broker drains: whether :class:`StreamDraining` is still to be
        emitted (a caller that read the GOAWAY leaves that to the I/O thread)."""
        return not self._drain_told

    def _goodbye(self) -> None:
        """Best effort GOAWAY (and whatever else h2 has queued) before closing."""
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._conn.close_connection()
        with contextlib.suppress(ConnectionLost):
            self._writer.flush()

    def _read(self) -> None:
        """Read what the socket has, ``READS_PER_TURN`` full reads at most.

        A broker that keeps the socket full must not keep this loop from handing acks
        over, honouring ``cancel()``/``close()`` and pinging, nor grow ``_arrived``
        without end: past the bound the turn ends with the watch's ``more_to_read`` set,
        and the next turn reads on without waiting (TLS may hold decrypted bytes that
        the selector does not see)."""
        sock = self._sock
        watch = self._watch
        outbuf = self._writer.outbuf
        watch.more_to_read = False
        for _ in range(READS_PER_TURN):
            data = self._calls.recv_some()
            if data is None:
                return
            if not data:
                raise ConnectionLost("the broker closed the connection")
            if self._stalls is not None or self._ping_every is not None:
                self._last_read = time.monotonic()
            self._ping_deadline = None
            responses = self._reader.receive(data)
            self._frames_ok = True
            if responses:
                if self._stalls is not None:
                    self._stalls.answered()
                self._pings.data_received()
                count = len(responses)
                self._gathering.answered(self._reader.data_bytes + 9 * count, count)
            credit = self._reader.credit_frames
            if credit:
                outbuf += credit
                credit.clear()
            answers = self._conn.data_to_send()  # h2's (PING and SETTINGS ACKs, ...)
            if answers:
                outbuf += answers
            if len(outbuf) > OUTPUT_CAP:
                # Answers pile up while we keep reading (a broker sending PINGs and not
                # reading): write what the socket takes, or end a flood (see limits).
                self._writer.flush()
            if responses:
                if self._arrived:
                    self._arrived += responses
                else:
                    self._arrived = responses
            if self._reader.ended:
                return
            if len(data) < RECV_SIZE and not (self._tls and sock.pending()):  # type: ignore[attr-defined]
                return
        watch.more_to_read = True
