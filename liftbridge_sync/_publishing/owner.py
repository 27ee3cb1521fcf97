"""The owner loop: the ``liftbridge-publisher`` thread, its inbox and timers, and the stream.

Callers enter publishes and write them themselves (:mod:`.publisher`, :mod:`.table`);
this thread, woken only by whole batches, does everything else: ack timeouts (it sleeps
until the oldest deadline of the pending table, a deque per timeout value in send order,
no timer per message), the end of a stream (it reopens it, rotating brokers with
back-off from the retry policy, and re-sends every unacknowledged message in order
under the send lock), running done-callbacks, and closing. Answers from the server are
routed by :mod:`.answers`, re-sends without a new stream are :mod:`.resending`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from liftbridge_sync._publishing.answers import AckRouter
from liftbridge_sync._publishing.dialing import DialAttempts
from liftbridge_sync._publishing.failover import ProbeResult
from liftbridge_sync._publishing.futures import settle
from liftbridge_sync._publishing.pending import (
    INF,
    KICK,
    MAX_NESTING,
    TOO_DEEP,
    WAKE,
    Close,
    Entry,
    FailureLedger,
    Forwarded,
    failure,
)
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.opening import publish_opener
from liftbridge_sync._transport.publish_stream import (
    PublishStream,
    StreamClosed,
    StreamDraining,
    StreamOpener,
    StreamResponse,
    StreamResponses,
    StreamSent,
)
from liftbridge_sync._transport.retry import backoff_delay
from liftbridge_sync._wire.publish_codec import Answer
from liftbridge_sync.errors import (
    ClientClosedError,
    InternalThreadError,
    LiftbridgeError,
    PublishError,
)

__all__ = ["OwnerLoop", "max_message"]

_log = logging.getLogger("liftbridge_sync.publisher")


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
    """The ``liftbridge-publisher`` thread and what it alone touches: the stream (its
    epochs, draining streams, reconnect timing), timers, closing.

    Thread-safe: :meth:`start`, :meth:`close`, :meth:`barrier` and the inbox may be used
    from any thread; the rest of its state is touched only by the owner thread (and
    :meth:`on_stream_event` by the current stream's thread, as documented there).
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
        self._core = core
        self._options = core.options
        self._table = table
        self._router = router
        self._resender = resender
        self._ledger = ledger
        self._inbox = inbox
        self._wake_waiters = wake_waiters
        self._opener = opener or publish_opener(core.options.publish_transport)
        self._clock = clock
        self._lock = threading.Lock()  # thread start and close
        self._thread: threading.Thread | None = None
        self._stream: PublishStream | None = None
        #: Streams whose broker is shutting down gracefully, by epoch: each answers
        #: the publishes it was sent (their ids alongside) and then ends; the next
        #: stream does not send those again unless it ends without answering them.
        self._draining: dict[int, tuple[PublishStream, set[str]]] = {}
        self._epoch = 0
        self._address = ""  # of the current stream's broker
        self._failures = 0
        self._reconnect_at: float | None = None
        self._close_requested = False
        self._close_deadline: float | None = None
        self._linger_until: float | None = None
        self._nesting = 0
        #: Why the owner thread died, if it did (see InternalThreadError).
        self._crash: BaseException | None = None
        self._connects = 0
        #: Failed attempts to open a stream in a row (see dialing).
        self._dials = DialAttempts(core.options.retry)
        self._resent_after_reconnect = 0

    @property
    def connects(self) -> int:
        """Streams opened so far."""
        return self._connects

    @property
    def resent_after_reconnect(self) -> int:
        """Publishes re-sent on a new stream after the one before ended."""
        return self._resent_after_reconnect

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

        Args:
            timeout: Seconds to wait for pending acks (``None``: until each times out).
        """
        with self._lock:
            already = self._table.close_admission()
            thread = self._thread
        if thread is None:
            return
        if not already:
            deadline = None if timeout is None else self._clock() + timeout
            self._inbox.put(Close(deadline))
        if threading.current_thread() is not thread:
            thread.join()

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
        stall_check = self._resender.watch_stalls(now, self._stream is not None)
        upcoming = [
            c
            for c in (
                head,
                self._reconnect_at,
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
            if self._stream is not None:
                self._stream.probe()  # a dead peer ends the stream: we reconnect
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
        if self._reconnect_at is not None and now >= self._reconnect_at:
            self._reconnect_at = None
            if self._table.entries:
                self._connect()
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
        if type(event) is Forwarded:
            if event.epoch == self._epoch or event.epoch in self._draining:
                self._router.on_responses(event.responses)
            self._router.handled()
        elif isinstance(event, StreamResponses):
            if event.epoch == self._epoch:
                self._failures = 0
                self._router.on_responses(event.responses)
            elif event.epoch in self._draining:
                self._router.on_responses(event.responses)
        elif isinstance(event, StreamResponse):
            if event.epoch == self._epoch:
                self._failures = 0
                self._router.on_responses((event.response,))
            elif event.epoch in self._draining:
                self._router.on_responses((event.response,))
        elif event is WAKE:
            pass  # _plan() looks at the new deadlines
        elif type(event) is Barrier:
            event.passed.set()  # everything before it in this thread is done
        elif event is KICK:
            if self._stream is None and self._reconnect_at is None and self._table.entries:
                self._connect()
        elif isinstance(event, StreamSent):
            pending = self._table.entries
            entry = pending.get(event.correlation_id)
            current = event.epoch == self._epoch or event.epoch in self._draining
            if current and entry is not None and not entry.wants_ack:
                del pending[event.correlation_id]
                settle(((entry.future, None, None),))
                self._wake_waiters()
        elif isinstance(event, StreamClosed):
            if event.epoch == self._epoch:
                if event.reached:
                    self._dials.succeeded()
                elif event.error is not None:  # a connect that failed late (grpc)
                    self._dials.failed(self._address, event.error, self._clock())
                self._on_stream_closed(event.error)
            elif event.epoch in self._draining:
                self._on_drained(event.epoch, event.error)
        elif isinstance(event, StreamDraining):
            if event.epoch == self._epoch and self._stream is not None:
                self._start_draining()
        elif isinstance(event, ProbeResult):
            self._resender.on_probe_result(event)
        elif isinstance(event, Close):
            self._close_requested = True
            self._close_deadline = event.deadline

    def _connect(self) -> None:
        addresses = self._core.addresses()
        address = self._address = addresses[self._epoch % len(addresses)]
        self._epoch += 1
        try:
            stream = self._opener(self._core, address, self._epoch, self._on_stream_event)
        except ClientClosedError as exc:
            self._fail_all(exc)
            return
        except LiftbridgeError as exc:
            # A transport that connects eagerly (h2) fails here instead of with an event.
            self._stream = None
            self._dials.failed(address, exc, self._clock())
            self._on_stream_closed(exc)
            return
        # A transport that cannot tell yet (grpc, channel not connected) says so later,
        # in StreamClosed; meanwhile what it is sent still counts as never sent.
        confirmed = getattr(stream, "confirmed", True)
        if confirmed:
            self._dials.succeeded()
        self._stream = stream
        self._connects += 1
        # Those of draining streams are answered by them, unless those fail.
        held: set[str] = set().union(*(ids for _, ids in self._draining.values()))
        entries = self._table.go_live(stream, held, confirmed)
        if entries:
            _log.info("publish stream %d open on %s; sent %d", self._epoch, address, len(entries))
        if self._connects > 1:
            self._resent_after_reconnect += len(entries)

    def _start_draining(self) -> None:
        """The current stream's broker is shutting down gracefully: it answers what it
        was sent, so that stays with it; new publishes go to a new stream at once."""
        stream = self._stream
        assert stream is not None
        held = self._table.go_offline()
        self._stream = None
        self._draining[self._epoch] = (stream, held)
        # Half-close after whatever was queued on it: the broker ends the call once it
        # has answered (it waits for nothing more from us).
        stream.close()
        _log.info(
            "publish stream %d: the broker is shutting down gracefully; %d publishes wait "
            "for its answers, new ones go to another connection",
            self._epoch,
            len(held),
        )
        self._connect()

    def _on_drained(self, epoch: int, error: LiftbridgeError | None) -> None:
        """A draining stream ended: what it left unanswered goes again (in order) on the
        live stream, or on the next one."""
        stream, held = self._draining.pop(epoch)
        stream.join(1.0)
        if error is not None:
            _log.info("draining publish stream %d ended: %s", epoch, error)

        pending = self._table.entries

        def unanswered() -> list[Entry]:
            left = [pending[i] for i in held if i in pending]
            return sorted(left, key=lambda e: e.seq)

        count = self._table.send_again(unanswered)
        self._resent_after_reconnect += count
        if count:
            _log.warning("re-sent %d publishes a gracefully stopped broker left unanswered", count)
        elif self._stream is None and self._reconnect_at is None and pending:
            self._connect()  # not connected: the next stream sends them

    def _on_stream_closed(self, error: LiftbridgeError | None) -> None:
        self._resender.disrupted()
        self._table.go_offline()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.join(1.0)
        if not self._table.entries:
            return  # reopen lazily on the next publish
        if error is not None and not error.retryable:
            _log.warning("publish stream failed: %s", error)
            self._fail_all(error)
            return
        if self._dials.exhausted(self._clock()):
            self._fail_unsent()
            if not self._table.entries:
                return
        # Keep reconnecting while anything is pending: each entry's own deadline bounds
        # how long it waits, so giving up earlier would only fail work that may succeed.
        self._failures += 1
        delay = backoff_delay(self._options.retry, self._failures)
        _log.warning(
            "publish stream broke (%s); reconnecting in %.3fs, then re-sending %d",
            error or "ended by server",
            delay,
            len(self._table),
        )
        self._reconnect_at = self._clock() + delay

    def _fail_unsent(self) -> None:
        """Fail the publishes no broker ever saw: no broker was reachable for as long as
        the retry policy allows. Those written to a broker before keep waiting for their
        ack (or its timeout): the broker may have stored them."""
        error = self._dials.error(self._clock())
        unsent = self._table.take_unsent()
        if unsent:
            _log.warning("%s; failing %d publishes never sent", error, len(unsent))
            settle([failure(e, error) for e in unsent], self._ledger)
            self._wake_waiters()

    def _fail_all(self, error: BaseException) -> None:
        entries = self._table.take_all()
        settle([failure(e, error) for e in entries], self._ledger)
        self._wake_waiters()

    def _shutdown(self) -> None:
        self._table.finish()
        self._resender.close()
        if self._crash is not None:
            self._fail_all(self._closed_error())
        else:
            self._fail_all(ClientClosedError("publisher closed before the ack arrived"))
        self._table.clear_deadlines()
        draining = [old for old, _ in self._draining.values()]
        self._draining.clear()
        for old in draining:
            old.cancel()
            old.join(5.0)
        stream, self._stream = self._stream, None
        if stream is not None:
            # Half-close first so that requests already queued are written, then give
            # the server a moment to end the call before aborting it.
            stream.close()
            stream.join(2.0)
            stream.cancel()
            stream.join(5.0)

    def _on_stream_event(self, event: object) -> None:
        """Stream events arrive here on the stream's thread.

        Plain acks of futures without done-callbacks are resolved right here (a
        ``publish()`` waiting for one wakes without a hop through the publisher thread);
        everything else goes to the publisher thread's inbox.
        """
        responses: Sequence[Answer]
        if type(event) is StreamResponses and event.epoch == self._epoch:
            responses = event.responses
        elif type(event) is StreamResponse and event.epoch == self._epoch:
            responses = [event.response]
        else:
            self._inbox.put(event)
            return
        self._failures = 0  # the stream works (reconnect back-off starts afresh)
        self._table.reached()
        rest = self._router.resolve_plain(responses)
        if rest:
            # Only this (the current stream's) thread counts up, only the owner down.
            self._router.forwarded()
            self._inbox.put(Forwarded(event.epoch, rest))
