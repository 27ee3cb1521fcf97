"""The ``liftbridge-publisher`` thread: the publisher's state and its event loop.

Callers enter publishes and write them themselves (:mod:`.publisher`); this thread,
woken only by whole batches, does everything else: ack timeouts (it sleeps until the
oldest deadline, a deque per timeout value in send order, no timer per message), the
end of a stream (it reopens it, rotating brokers with back-off from the retry policy,
and re-sends every unacknowledged message in order under the send lock), running
done-callbacks, and closing. Answers from the server are handled in :mod:`.answers`.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from liftbridge_sync._publishing.dialing import DialAttempts
from liftbridge_sync._publishing.failover import LeaderProbe, PartitionKey, ProbeResult
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
    Outcome,
    failure,
    pop_answered,
)
from liftbridge_sync._publishing.recovering import RecoveringPartitions
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
    AckTimeoutError,
    ClientClosedError,
    InternalThreadError,
    LiftbridgeError,
    PublishError,
)

__all__ = ["OwnerLoop"]

_log = logging.getLogger("liftbridge_sync.publisher")


def _max_message(grpc_options: tuple[tuple[str, Any], ...]) -> int:
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
    """The publisher's shared state and what its owner thread runs.

    Thread-safe as documented per attribute: shared state is written under the send lock
    and popped by the owner thread; owner-thread state is touched only by it.
    """

    def __init__(
        self,
        core: ClientCore,
        *,
        opener: StreamOpener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._options = core.options
        self._max_in_flight = core.options.max_in_flight
        self._max_message = _max_message(core.options.grpc_options) + 5  # framed
        self._opener = opener or publish_opener(core.options.publish_transport)
        self._clock = clock
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()  # thread start and close
        #: Orders messages: entering a publish in ``_pending`` and handing it to the
        #: stream happen together under it, and so does re-sending on a new stream.
        self._send_lock = threading.Lock()
        #: Guards ``_waits``.
        self._space = threading.Lock()
        #: Threads blocked until a condition holds (a free slot, a flush, a batch):
        #: ``(condition, gate)``, each thread blocked on its own gate (a lock it holds).
        #: Whoever changes what the conditions read releases the gates of those that
        #: now hold, so the many batches of acks that free nothing a waiter needs wake
        #: nobody, and one thread's batch done wakes that thread only.
        self._waits: list[tuple[Callable[[], bool], threading.Lock]] = []
        self._failures_ledger = FailureLedger()
        self._thread: threading.Thread | None = None
        self._closing = False
        #: Set (under the send lock) just before pending publishes are failed for good.
        self._finished = False
        self._ids = itertools.count()
        self._seqs = itertools.count(1)
        self._seq = 0  # the last sequence number handed out (under the send lock)
        self._id_prefix = f"{os.getpid():x}.{random.getrandbits(48):012x}."
        # Shared: written under the send lock, popped by the owner thread only.
        self._pending: dict[str, Entry] = {}
        self._expiry: dict[float, collections.deque[Entry]] = {}
        self._live: PublishStream | None = None  # the open stream publishers write to
        #: The owner sleeps until then; a publish due earlier wakes it.
        self._sleep_until = INF
        #: Response batches the stream's thread handed to the owner, and those the owner
        #: has handled (each counter has one writer); the stream's thread resolves acks
        #: itself only while they are equal.
        self._forwarded = 0
        self._handled = 0
        # Owner-thread state below: touched only by the liftbridge-publisher thread.
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
        self._resend_after = core.options.resend_after
        self._probe = LeaderProbe(core, self._inbox.put, clock=clock)
        self._probing: set[PartitionKey] = set()
        #: Silent partitions with trouble seen (see failover); re-sent once idle.
        self._troubled: set[PartitionKey] = set()
        #: The leader each silent partition had when its silence was first probed.
        self._silent_leaders: dict[PartitionKey, str | None] = {}
        #: Since when each silent partition's leader has been seen idle and committed.
        self._idle_since: dict[PartitionKey, float] = {}
        #: When the stream last broke or a broker last refused for want of NATS.
        self._disrupted_at = -INF
        self._next_stall_check = 0.0
        self._connects = 0
        #: Failed attempts to open a stream in a row (see dialing).
        self._dials = DialAttempts(core.options.retry)
        #: The sequence number from which publishes were never handed to a stream (they
        #: wait for the next one); ``None`` while a stream is live. Under the send lock.
        self._unsent_from: int | None = 1
        self._resent_after_reconnect = 0
        self._resent_after_stall = 0
        self._stall_probes = 0
        #: Publishes the server could not hand to NATS, to send again at the time below.
        self._refused: list[Entry] = []
        self._resend_refused_at: float | None = None
        self._refusals = 0  # consecutive rounds of such refusals (for the back-off)
        self._resent_after_refusal = 0
        #: NOT_FOUND refusals from brokers still rebuilding their streams.
        self._recovering = RecoveringPartitions(core, self._probe.refresh)

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

    def _owner_barrier(self, timeout: float) -> None:
        """Return once the owner thread has finished what it was doing (at most
        ``timeout`` seconds): a round trip through its inbox, behind its current turn."""
        thread = self._thread
        if thread is None or not thread.is_alive() or self._on_owner_thread():
            return
        barrier = Barrier(threading.Event())
        self._inbox.put(barrier)
        barrier.passed.wait(timeout)

    def _on_owner_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _wake_waiters(self) -> None:
        if self._waits:
            with self._space:
                waits = self._waits
                for i in range(len(waits) - 1, -1, -1):
                    ready, gate = waits[i]
                    if ready():
                        del waits[i]
                        gate.release()

    def _run(self) -> None:
        try:
            while not (self._close_requested and self._drained()):
                self._step(self._plan())
        except BaseException as exc:  # a bug must not leave futures hanging
            _log.exception("the liftbridge-publisher thread crashed; failing pending publishes")
            self._crash = exc
            with self._lock:
                self._closing = True
        finally:
            self._shutdown()

    def _drained(self) -> bool:
        if not self._pending:
            return True
        deadline = self._close_deadline
        return deadline is not None and self._clock() >= deadline

    def _plan(self) -> float | None:
        """Expire what is due; how long to sleep (``None``: until an event)."""
        # Publishers entering now wake us: we may not see their entries below.
        self._sleep_until = INF
        now = self._clock()
        head = self._expire(now)
        if head is None and not self._pending:
            # Nothing to time: linger for one ack timeout before sleeping for good, so a
            # one-at-a-time publisher (due later than that) does not wake us every time.
            if self._linger_until is None:
                self._linger_until = now + self._options.ack_timeout
            if now < self._linger_until:
                head = self._linger_until
        else:
            self._linger_until = None
        stall_check = self._watch_stalls(now)
        upcoming = [
            c
            for c in (
                head,
                self._reconnect_at,
                self._close_deadline,
                stall_check,
                self._resend_refused_at,
            )
            if c is not None
        ]
        if not upcoming:
            return None
        until = min(upcoming)
        self._sleep_until = until
        return max(0.0, until - now)

    def _expire(self, now: float) -> float | None:
        """Fail publishes past their deadline; the earliest deadline still to come."""
        pending = self._pending
        earliest: float | None = None
        timed_out: list[Outcome] = []
        # Under the send lock: the stream's thread also pops answered entries
        # (_drop_answered), and two threads popping one deque could drop a live entry.
        with self._send_lock:
            for queue_ in self._expiry.values():
                while pop_answered(queue_, pending):
                    entry = queue_[0]
                    if entry.deadline <= now:
                        queue_.popleft()
                        if pending.pop(entry.correlation_id, None) is not entry:
                            continue  # the stream's thread resolved it just now
                        what = "no ack" if entry.wants_ack else "not sent"
                        stream_name, partition = entry.partition_key()
                        error = AckTimeoutError(
                            f"{what} within {entry.timeout}s (stream {stream_name!r}, "
                            f"partition {partition}, correlation id {entry.correlation_id})"
                        )
                        timed_out.append(failure(entry, error))
                        continue
                    if earliest is None or entry.deadline < earliest:
                        earliest = entry.deadline
                    break
            if len(self._expiry) > 16:
                for key in [k for k, q in self._expiry.items() if not q]:
                    del self._expiry[key]
        if timed_out:
            settle(timed_out, self._failures_ledger)
            self._wake_waiters()
            if self._stream is not None:
                self._stream.probe()  # a dead peer ends the stream: we reconnect
        return earliest

    def _drop_answered(self) -> None:
        """Pop answered publishes off the heads of the deadline queues.

        Called on the stream's thread after it resolved acks. Otherwise the queues keep
        every answered entry (with its future, ack and request bytes) until the owner
        next wakes, up to a second of traffic: objects that age into the garbage
        collector's oldest generation and make its full collections slow.
        """
        # Never wait for the lock: publishing threads take it for every message, and the
        # stream's thread would hold its I/O lock meanwhile, so nobody could write.
        # What is left now goes with the next batch of acks.
        if not self._send_lock.acquire(blocking=False):
            return
        try:
            for queue_ in self._expiry.values():
                pop_answered(queue_, self._pending)
        finally:
            self._send_lock.release()

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
            if self._pending:
                self._connect()
        if self._resend_refused_at is not None and now >= self._resend_refused_at:
            self._resend_refused()

    def _run_nested(self, until: Callable[[], bool], deadline: float | None) -> bool:
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
                self._on_responses(event.responses)
            self._handled += 1
        elif isinstance(event, StreamResponses):
            if event.epoch == self._epoch:
                self._failures = 0
                self._on_responses(event.responses)
            elif event.epoch in self._draining:
                self._on_responses(event.responses)
        elif isinstance(event, StreamResponse):
            if event.epoch == self._epoch:
                self._failures = 0
                self._on_responses((event.response,))
            elif event.epoch in self._draining:
                self._on_responses((event.response,))
        elif event is WAKE:
            pass  # _plan() looks at the new deadlines
        elif type(event) is Barrier:
            event.passed.set()  # everything before it in this thread is done
        elif event is KICK:
            if self._stream is None and self._reconnect_at is None and self._pending:
                self._connect()
        elif isinstance(event, StreamSent):
            entry = self._pending.get(event.correlation_id)
            current = event.epoch == self._epoch or event.epoch in self._draining
            if current and entry is not None and not entry.wants_ack:
                del self._pending[event.correlation_id]
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
            self._on_probe_result(event)
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
        now = self._clock()
        with self._send_lock:
            entries = list(self._pending.values())
            if self._draining:  # answered by their draining streams, unless those fail
                held = set().union(*(ids for _, ids in self._draining.values()))
                entries = [e for e in entries if e.correlation_id not in held]
            if entries:
                _log.info(
                    "publish stream %d open on %s; sending %d", self._epoch, address, len(entries)
                )
            for entry in entries:
                stream.send_framed(entry.framed, None if entry.wants_ack else entry.correlation_id)
                entry.resent_at = now
            if not self._finished:
                self._live = stream
                if confirmed:
                    self._unsent_from = None
        if self._connects > 1:
            self._resent_after_reconnect += len(entries)

    def _start_draining(self) -> None:
        """The current stream's broker is shutting down gracefully: it answers what it
        was sent, so that stays with it; new publishes go to a new stream at once."""
        stream = self._stream
        assert stream is not None
        with self._send_lock:
            self._go_offline()
            held = set(self._pending)
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

        def unanswered() -> list[Entry]:
            left = [self._pending[i] for i in held if i in self._pending]
            return sorted(left, key=lambda e: e.seq)

        count = self._send_again(unanswered)
        self._resent_after_reconnect += count
        if count:
            _log.warning("re-sent %d publishes a gracefully stopped broker left unanswered", count)
        elif self._stream is None and self._reconnect_at is None and self._pending:
            self._connect()  # not connected: the next stream sends them

    def _go_offline(self) -> None:
        """No stream to write to (under the send lock): later publishes wait unsent."""
        self._live = None
        if self._unsent_from is None:
            self._unsent_from = self._seq + 1

    def _on_stream_closed(self, error: LiftbridgeError | None) -> None:
        self._disrupted_at = self._clock()
        with self._send_lock:
            self._go_offline()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.join(1.0)
        if not self._pending:
            return  # reopen lazily on the next publish
        if error is not None and not error.retryable:
            _log.warning("publish stream failed: %s", error)
            self._fail_all(error)
            return
        if self._dials.exhausted(self._clock()):
            self._fail_unsent()
            if not self._pending:
                return
        # Keep reconnecting while anything is pending: each entry's own deadline bounds
        # how long it waits, so giving up earlier would only fail work that may succeed.
        self._failures += 1
        delay = backoff_delay(self._options.retry, self._failures)
        _log.warning(
            "publish stream broke (%s); reconnecting in %.3fs, then re-sending %d",
            error or "ended by server",
            delay,
            len(self._pending),
        )
        self._reconnect_at = self._clock() + delay

    def _fail_unsent(self) -> None:
        """Fail the publishes no broker ever saw: no broker was reachable for as long as
        the retry policy allows. Those written to a broker before keep waiting for their
        ack (or its timeout): the broker may have stored them."""
        error = self._dials.error(self._clock())
        with self._send_lock:
            first = self._unsent_from
            if first is None:
                return
            unsent = [e for e in self._pending.values() if e.seq >= first]
            for entry in unsent:
                self._pending.pop(entry.correlation_id, None)
        if unsent:
            _log.warning("%s; failing %d publishes never sent", error, len(unsent))
            settle([failure(e, error) for e in unsent], self._failures_ledger)
            self._wake_waiters()

    def _fail_all(self, error: BaseException) -> None:
        entries = list(self._pending.values())
        self._pending.clear()
        settle([failure(e, error) for e in entries], self._failures_ledger)
        self._wake_waiters()

    def _shutdown(self) -> None:
        with self._send_lock:
            self._finished = True
            self._go_offline()
        self._probe.close()
        if self._crash is not None:
            self._fail_all(self._closed_error())
        else:
            self._fail_all(ClientClosedError("publisher closed before the ack arrived"))
        self._expiry.clear()
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

    # -- implemented by AnswerHandling (answers.py); the loop calls them ---------------

    def _on_stream_event(self, event: object) -> None:
        raise NotImplementedError

    def _on_responses(self, responses: Sequence[Answer]) -> None:
        raise NotImplementedError

    def _watch_stalls(self, now: float) -> float | None:
        raise NotImplementedError

    def _on_probe_result(self, result: ProbeResult) -> None:
        raise NotImplementedError

    def _resend_refused(self) -> None:
        raise NotImplementedError

    def _send_again(self, pick: Callable[[], list[Entry]]) -> int:
        raise NotImplementedError
