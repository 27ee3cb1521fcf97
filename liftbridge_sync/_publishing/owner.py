"""The owner loop: the ``liftbridge-publisher`` thread, its inbox and its timers.

Callers enter publishes and write them themselves (:mod:`.publisher`, :mod:`.table`);
this thread, woken only by whole batches, does everything else: ack timeouts (it sleeps
until the oldest deadline of the pending table, a deque per timeout value in send order,
no timer per message), the end of a stream (when the back-off is over, its
:class:`~.connection.PublishConnection` reopens it, rotating brokers, and re-sends every
unacknowledged message in order under the send lock), running done-callbacks (nested
loops for those that wait), and closing. The stream's life is :mod:`.connection`'s;
answers from the server are routed by :mod:`.answers`, re-sends without a new stream
are :mod:`.resending`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from liftbridge_sync._publishing.answers import AckRouter
from liftbridge_sync._publishing.connection import PublishConnection
from liftbridge_sync._publishing.failover import ProbeResult
from liftbridge_sync._publishing.futures import settle
from liftbridge_sync._publishing.pending import (
    INF,
    KICK,
    MAX_NESTING,
    TOO_DEEP,
    WAKE,
    Close,
    FailureLedger,
    Forwarded,
)
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.publish_stream import (
    StreamClosed,
    StreamDraining,
    StreamOpener,
    StreamResponse,
    StreamResponses,
    StreamSent,
)
from liftbridge_sync.errors import (
    ClientClosedError,
    InternalThreadError,
    LiftbridgeError,
    PublishError,
)

__all__ = ["CLOSE_SLACK", "OwnerLoop", "max_message"]

_log = logging.getLogger("liftbridge_sync.publisher")

#: Seconds :meth:`OwnerLoop.close` waits past its deadline for the owner thread to end
#: (a dial under way abandoned, the streams ended): ``close(timeout=T)`` returns within
#: ``T + CLOSE_SLACK``.
CLOSE_SLACK = 1.0
#: Of that, what the owner thread gives its streams to end (the rest is its margin).
_STREAMS_SLACK = 0.75


def max_message(grpc_options: tuple[tuple[str, Any], ...]) -> int:
    """The largest request to send: ``grpc.max_send_message_length``, else 4 MiB (what a
    Liftbridge server, on grpc-go's defaults, accepts)."""
    limit = dict(grpc_options).get("grpc.max_send_message_length")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    return 4 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Barrier:
    """An inbox event the owner thread answers by setting ``passed``."""

    passed: threading.Event


class OwnerLoop:
    """The ``liftbridge-publisher`` thread and what it alone touches: the inbox, timers,
    nested loops, closing, and the stream's :class:`~.connection.PublishConnection`
    (which it owns and drives).

    Thread-safe: :meth:`start`, :meth:`close`, :meth:`barrier` and the inbox may be used
    from any thread; the rest of its state is touched only by the owner thread (and
    the connection's :meth:`~.connection.PublishConnection.on_stream_event` by the
    current stream's thread, as documented there).
    """

    def __init__(
        self,
        core: ClientCore,
        table: PendingTable,
        router: AckRouter,
        resender: Resender,
        ledger: FailureLedger,
        inbox: queue.SimpleQueue[object],
        wake_waiters: Callable[[], None],
        *,
        opener: StreamOpener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._options = core.options
        self._table = table
        self._router = router
        self._resender = resender
        self._ledger = ledger
        self._inbox = inbox
        self._wake_waiters = wake_waiters
        self._clock = clock
        self._lock = threading.Lock()  # thread start and close
        self._thread: threading.Thread | None = None
        #: The stream: opened, drained, reopened after it ends, closed (its one owner).
        self._connection = PublishConnection(
            core,
            table,
            router,
            resender,
            ledger,
            inbox,
            wake_waiters,
            opener=opener,
            clock=clock,
        )
        self._close_requested = False
        self._close_deadline: float | None = None
        #: When close() stops waiting for acks (its deadline, or for ``timeout=None``
        #: the latest ack deadline pending then); set once, by the first close().
        self._close_by: float | None = None
        self._linger_until: float | None = None
        self._nesting = 0
        #: Why the owner thread died, if it did (see InternalThreadError).
        self._crash: BaseException | None = None

    @property
    def connects(self) -> int:
        """Streams opened so far."""
        return self._connection.connects

    @property
    def resent_after_reconnect(self) -> int:
        """Publishes re-sent on a new stream after the one before ended."""
        return self._connection.resent_after_reconnect

    def closed_error(self) -> LiftbridgeError:
        """The error of a publish refused because the publisher is closed (or died)."""
        return self._closed_error()

    def start(self) -> None:
        """Start the owner thread, if it is not running yet.

        Raises:
            ClientClosedError, InternalThreadError: the publisher is closed.
        """
        with self._lock:
            if self._table.closing:
                raise self._closed_error()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="liftbridge-publisher", daemon=True
                )
                self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def close(self, timeout: float | None) -> None:
        """Stop accepting publishes, wait for pending acks, fail what is left. Idempotent.

        A call still waiting for a free slot was not accepted: it fails at once, unsent
        (:class:`ClientClosedError`).

        Returns within ``timeout`` + :data:`CLOSE_SLACK` seconds, whatever the broker does: at
        the deadline a dial under way (a name lookup, a connect, the TLS pre-flight, a
        TLS or HTTP/2 handshake waiting for the broker) is abandoned, and the streams
        get what is left of the slack to end (then they are cancelled). When it returns,
        every publish pending has failed (:class:`ClientClosedError`, or
        :class:`AckTimeoutError` for those whose ack timeout came first) and the owner
        thread has ended; but for one blocked outside the library's waits (a
        done-callback that blocks), which is not waited for longer: it ends by itself
        when that returns (daemonic, ``liftbridge-publisher``), failing what is left
        then. A later call waits for the first call's deadline; called from a
        done-callback (the owner thread), it returns at once.

        Args:
            timeout: Seconds to wait for pending acks (``None``: until each times out,
                so the latest ack deadline pending now is the deadline).
        """
        with self._lock:
            already = self._table.close_admission()
            thread = self._thread
            if self._close_by is None:
                now = self._clock()
                self._close_by = (
                    self._table.latest_deadline(now) if timeout is None else now + timeout
                )
            close_by = self._close_by
        if not already:
            # The calls waiting for a free slot were not accepted: they fail now.
            self._wake_waiters()
        if thread is None:
            return
        if not already:
            self._inbox.put(Close(None if timeout is None else close_by))
        if threading.current_thread() is thread:
            return
        thread.join(max(0.0, close_by - self._clock()))
        if not thread.is_alive():
            return
        # The deadline passed with the thread still busy: stop waiting for acks (those
        # entered while close() began may be due later), and abandon a dial under way,
        # which it cannot leave to see the close.
        self._inbox.put(Close(close_by))
        self._connection.abort_dials()
        thread.join(max(0.0, close_by + CLOSE_SLACK - self._clock()))
        if thread.is_alive():
            _log.warning(
                "the liftbridge-publisher thread did not end within %gs of close()'s "
                "deadline (a done-callback that blocks?); it ends by itself once free",
                CLOSE_SLACK,
            )

    def check_can_nest(self) -> None:
        """Refuse a blocking call on the owner thread past the nesting limit.

        Raises:
            PublishError: the nesting limit is reached.
        """
        if self._nesting >= MAX_NESTING and self.on_owner_thread():
            raise PublishError(TOO_DEEP)

    def _closed_error(self) -> LiftbridgeError:
        crash = self._crash
        if crash is None:
            return ClientClosedError("publisher is closed")
        error = InternalThreadError(
            f"the liftbridge-publisher thread died ({crash!r}), so this client can no longer "
            "publish; close it and create a new one"
        )
        error.__cause__ = crash
        return error

    def barrier(self, timeout: float) -> None:
        """Return once the owner thread has finished what it was doing (at most
        ``timeout`` seconds): a round trip through its inbox, behind its current turn."""
        thread = self._thread
        if thread is None or not thread.is_alive() or self.on_owner_thread():
            return
        barrier = Barrier(threading.Event())
        self._inbox.put(barrier)
        barrier.passed.wait(timeout)

    def on_owner_thread(self) -> bool:
        """Whether the calling thread is the owner thread (a done-callback)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _run(self) -> None:
        try:
            while not (self._close_requested and self._drained()):
                self._step(self._plan())
        except BaseException as exc:  # a bug must not leave futures hanging
            _log.exception("the liftbridge-publisher thread crashed; failing pending publishes")
            self._crash = exc
            with self._lock:
                self._table.close_admission()
        finally:
            self._shutdown()

    def _drained(self) -> bool:
        if not self._table.entries:
            return True
        deadline = self._close_deadline
        return deadline is not None and self._clock() >= deadline

    def _plan(self) -> float | None:
        """Expire what is due; how long to sleep (``None``: until an event)."""
        # Publishers entering now wake us: we may not see their entries below.
        self._table.sleep_until(INF)
        now = self._clock()
        head = self._expire(now)
        if head is None and not self._table.entries:
            # Nothing to time: linger for one ack timeout before sleeping for good, so a
            # one-at-a-time publisher (due later than that) does not wake us every time.
            if self._linger_until is None:
                self._linger_until = now + self._options.ack_timeout
            if now < self._linger_until:
                head = self._linger_until
                # Callers write their publishes themselves while we linger, without
                # waking us (their deadlines are later than this wake): look again
                # within resend_after, or a publish lost then would wait for its ack
                # timeout instead of being noticed silent (a leader killed just after
                # a burst was acknowledged lost the whole next window that way).
                resend_after = self._options.resend_after
                if resend_after is not None:
                    head = min(head, now + resend_after)
        else:
            self._linger_until = None
        connection = self._connection
        stall_check = self._resender.watch_stalls(now, connection.stream is not None)
        upcoming = [
            c
            for c in (
                head,
                connection.reconnect_at,
                self._close_deadline,
                stall_check,
                self._resender.resend_refused_at,
            )
            if c is not None
        ]
        if not upcoming:
            return None
        until = min(upcoming)
        self._table.sleep_until(until)
        return max(0.0, until - now)

    def _expire(self, now: float) -> float | None:
        """Fail publishes past their deadline; the earliest deadline still to come."""
        timed_out, earliest = self._table.expire(now)
        if timed_out:
            settle(timed_out, self._ledger)
            self._wake_waiters()
            stream = self._connection.stream
            if stream is not None:
                stream.probe()  # a dead peer ends the stream: we reconnect
        return earliest

    def _step(self, wait: float | None) -> None:
        try:
            event: object | None = self._inbox.get(timeout=wait) if wait != 0 else None
        except queue.Empty:
            event = None
        if event is not None:
            self._handle(event)
        # Drain what else is queued (bounded, so timers are never starved).
        for _ in range(4096):
            try:
                event = self._inbox.get_nowait()
            except queue.Empty:
                break
            self._handle(event)
        now = self._clock()
        reconnect_at = self._connection.reconnect_at
        if reconnect_at is not None and now >= reconnect_at:
            self._connection.reconnect()
        resend_refused_at = self._resender.resend_refused_at
        if resend_refused_at is not None and now >= resend_refused_at:
            self._resender.resend_refused()

    def run_nested(self, until: Callable[[], bool], deadline: float | None) -> bool:
        """On the owner thread: process events until ``until()`` (True) or ``deadline``
        (False), for a done-callback that waits.

        Raises:
            PublishError: the nesting limit is reached.
        """
        if self._nesting >= MAX_NESTING:
            raise PublishError(TOO_DEEP)
        self._nesting += 1
        try:
            while not until():
                if deadline is not None and self._clock() >= deadline:
                    return False
                wait = self._plan()
                if deadline is not None:
                    remaining = max(0.0, deadline - self._clock())
                    wait = remaining if wait is None else min(wait, remaining)
                self._step(min(wait, 0.05) if wait is not None else 0.05)
            return True
        finally:
            self._nesting -= 1

    def _handle(self, event: object) -> None:
        # Answers and sends (the per-message path) are routed here against the
        # connection's epochs, without a call into it; its other events are its own.
        if type(event) is Forwarded:
            if event.epoch == self._connection.epoch or event.epoch in self._connection.draining:
                self._router.on_responses(event.responses)
            self._router.handled()
        elif isinstance(event, StreamResponses):
            if event.epoch == self._connection.epoch:
                self._connection.answered()
                self._router.on_responses(event.responses)
            elif event.epoch in self._connection.draining:
                self._router.on_responses(event.responses)
        elif isinstance(event, StreamResponse):
            if event.epoch == self._connection.epoch:
                self._connection.answered()
                self._router.on_responses((event.response,))
            elif event.epoch in self._connection.draining:
                self._router.on_responses((event.response,))
        elif event is WAKE:
            pass  # _plan() looks at the new deadlines
        elif type(event) is Barrier:
            event.passed.set()  # everything before it in this thread is done
        elif event is KICK:
            self._connection.on_kick()
        elif isinstance(event, StreamSent):
            pending = self._table.entries
            entry = pending.get(event.correlation_id)
            current = (
                event.epoch == self._connection.epoch or event.epoch in self._connection.draining
            )
            # Other threads pop entries without a lock (a broker may answer even an
            # AckPolicy.NONE publish), so only the thread whose pop takes this very
            # entry settles it; a plain del could raise KeyError in this thread.
            if (
                current
                and entry is not None
                and not entry.wants_ack
                and pending.pop(event.correlation_id, None) is entry
            ):
                settle(((entry.future, None, None),))
                self._wake_waiters()
        elif isinstance(event, StreamClosed):
            self._connection.on_closed(event)
        elif isinstance(event, StreamDraining):
            self._connection.on_draining(event)
        elif isinstance(event, ProbeResult):
            if self._resender.on_probe_result(event):
                self._connection.replace_deaf()
        elif isinstance(event, Close):
            self._close_requested = True
            self._close_deadline = event.deadline

    def _shutdown(self) -> None:
        if self._crash is None:
            # Those whose ack timeout passed while this thread was busy (a dial close()
            # abandoned) time out, as they would have here: not "closed".
            timed_out, _ = self._table.expire(self._clock())
            if timed_out:
                settle(timed_out, self._ledger)
                self._wake_waiters()
        self._table.finish()
        if self._crash is not None:
            error: BaseException = self._closed_error()
        else:
            error = ClientClosedError("publisher closed before the ack arrived")
        # Within the slack of close()'s deadline (a crash has none: from now).
        now = self._clock()
        close_by = self._close_by
        until = max(now, now if close_by is None else close_by) + _STREAMS_SLACK
        # The callers first: the leader probe may be in the middle of a look (seconds
        # with a broker that drops packets), and nothing of it is needed any more.
        self._connection.shutdown(error, until)
        # A look under way ends when the client's channels close, right after this.
        self._resender.close(max(0.0, until - self._clock()))
