"""The publisher: pipelined publishing over one ``PublishAsync`` stream.

Every publish path goes over the bidirectional ``PublishAsync`` stream (a unary Publish
without a deadline is fire-and-forget on the server).

The per-message path has no thread hand-off. The calling thread, under one short send
lock that fixes the order of messages, enters the publish in the pending table (keyed by
correlation id) and in a deadline queue, and gives its framed bytes to the open stream
(which coalesces writes; :mod:`~liftbridge_sync._transport.h2`). The
``liftbridge-publisher`` thread does everything else, woken only by whole batches:

* responses read together (one inbox item per ``recv()``): it pops their entries and
  resolves their futures in bulk (:func:`~liftbridge_sync._publishing.futures.settle`),
  so done-callbacks run on this thread;
* ack timeouts: it sleeps until the oldest deadline (a deque per timeout value, in send
  order; no timer per message) and is woken by a publisher only if that one's deadline
  comes earlier;
* the end of a stream: it reopens it (rotating brokers, with back-off from the retry
  policy) and re-sends every unacknowledged message in order, under the send lock, so
  delivery stays at-least-once and ordered;
* :meth:`Publisher.close`.

A future always resolves or fails: at the latest when its timeout expires or the
publisher closes. A done-callback may call ``publish``, ``publish_async``, ``flush`` or
``close``: on the publisher thread those calls keep processing events while they wait
instead of blocking it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import importlib
import itertools
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing.encoding import ack_from_proto, head, set_ack_partition
from liftbridge_sync._publishing.futures import (
    PublishFuture,
    Unobserved,
    settle,
    settle_acks,
    settle_plain,
    take_acks,
)
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.publish_stream import (
    PublishStream,
    StreamClosed,
    StreamOpener,
    StreamResponse,
    StreamResponses,
    StreamSent,
    open_grpc_stream,
)
from liftbridge_sync._wire.speedups import frame_id
from liftbridge_sync._wire.status import (
    error_from_ack_error,
    error_from_async_error,
)
from liftbridge_sync.errors import (
    AckTimeoutError,
    ClientClosedError,
    ConfigurationError,
    LiftbridgeError,
    MessageTooLargeError,
    PublishError,
    PublishQueueFullError,
    UnobservedPublishFailuresError,
)
from liftbridge_sync.models import Ack, AckPolicy

__all__ = ["AckFuture", "Publisher"]

_log = logging.getLogger("liftbridge_sync.publisher")

AckFuture = PublishFuture[Ack | None]
_MAX_NESTING = 32
_TOO_DEEP = (
    f"done-callbacks that wait (publish, flush, a full window) are nested more than "
    f"{_MAX_NESTING} deep; nothing was sent. Use publish_async in deeply chained callbacks"
)
#: How many unobserved failures ``flush()`` quotes in its error.
_FAILURES_QUOTED = 10
_ACK_ERRORS = {1: "UNKNOWN", 2: "INCORRECT_OFFSET", 3: "TOO_LARGE", 4: "ENCRYPTION"}
_INF = float("inf")
_Outcome = tuple[PublishFuture[Any], Any, BaseException | None]
#: A response as the stream hands it over: the C reader gives successful acks as Acks.
_Response = api_pb2.PublishResponse | Ack


class _FailureLedger(Unobserved):
    """Publishes that failed and that nobody has looked at yet, for ``flush()`` to report.

    Thread-safe: failures are recorded on the owner thread, observations on any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unobserved: dict[int, BaseException] = {}  # id(future) -> error, in order
        self._count = 0

    def failed(self, future: PublishFuture[Any], error: BaseException) -> None:
        with self._lock:
            future.ledger = self
            self._count += 1
            if len(self._unobserved) < _FAILURES_QUOTED * 100:
                self._unobserved[id(future)] = error

    def observed(self, future: PublishFuture[Any]) -> None:
        with self._lock:
            if future.ledger is self:
                future.ledger = None
                self._count -= 1
                self._unobserved.pop(id(future), None)

    def take(self) -> tuple[int, list[BaseException]]:
        """The unobserved failures so far, forgetting them."""
        with self._lock:
            count, errors = self._count, list(self._unobserved.values())[:_FAILURES_QUOTED]
            self._count = 0
            self._unobserved.clear()
        return count, errors


@dataclasses.dataclass(slots=True, eq=False)
class _Entry:
    """One publish: its framed request and what resolving it needs."""

    framed: bytes
    correlation_id: str
    partition: int
    wants_ack: bool
    future: AckFuture
    timeout: float
    deadline: float
    seq: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Close:
    deadline: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Forwarded:
    """Responses the stream's thread left for the owner (failures, done-callbacks)."""

    epoch: int
    responses: list[_Response]


_WAKE = object()  # a publish with an earlier deadline than the owner sleeps until
_KICK = object()  # publishes are pending and no stream is open


def _max_message(grpc_options: tuple[tuple[str, Any], ...]) -> int:
    """The largest request to send: ``grpc.max_send_message_length``, else 4 MiB (what a
    Liftbridge server, on grpc-go's defaults, accepts)."""
    limit = dict(grpc_options).get("grpc.max_send_message_length")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    return 4 << 20


def _opener_for(transport: str) -> StreamOpener:
    if transport == "h2":
        module = importlib.import_module("liftbridge_sync._transport.h2.dial")
        opener: StreamOpener = module.open_h2_stream
        return opener
    return open_grpc_stream


class Publisher:
    """Pipelined publishing over one ``PublishAsync`` stream.

    Created by the :class:`~liftbridge_sync.Client` on first publish. Thread-safe:
    :meth:`submit`, :meth:`submit_many`, :meth:`flush` and :meth:`close` may be called
    from any thread, including a future's done-callback.
    """

    #: The client passes its close timeout through.
    close_accepts_timeout = True

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
        self._opener = opener or _opener_for(core.options.publish_transport)
        self._clock = clock
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()  # thread start and close
        #: Orders messages: entering a publish in ``_pending`` and handing it to the
        #: stream happen together under it, and so does re-sending on a new stream.
        self._send_lock = threading.Lock()
        #: Publishers waiting for a free slot and flushers wait here.
        self._space = threading.Condition(threading.Lock())
        self._blocked = 0
        self._failures_ledger = _FailureLedger()
        self._thread: threading.Thread | None = None
        self._closing = False
        #: Set (under the send lock) just before pending publishes are failed for good.
        self._finished = False
        self._ids = itertools.count()
        self._seqs = itertools.count(1)
        self._seq = 0  # the last sequence number handed out (under the send lock)
        self._id_prefix = f"{os.getpid():x}.{random.getrandbits(48):012x}."
        # Shared: written under the send lock, popped by the owner thread only.
        self._pending: dict[str, _Entry] = {}
        self._expiry: dict[float, collections.deque[_Entry]] = {}
        self._live: PublishStream | None = None  # the open stream publishers write to
        #: The owner sleeps until then; a publish due earlier wakes it.
        self._sleep_until = _INF
        #: Response batches the stream's thread handed to the owner, and those the owner
        #: has handled (each counter has one writer); the stream's thread resolves acks
        #: itself only while they are equal.
        self._forwarded = 0
        self._handled = 0
        # Owner-thread state below: touched only by the liftbridge-publisher thread.
        self._stream: PublishStream | None = None
        self._epoch = 0
        self._failures = 0
        self._reconnect_at: float | None = None
        self._close_requested = False
        self._close_deadline: float | None = None
        self._linger_until: float | None = None
        self._nesting = 0

    # ------------------------------------------------------------------ any thread

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (prefix + counter: cheap and unique)."""
        return f"{self._id_prefix}{next(self._ids)}"

    def _on_owner_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(
        self,
        framed: bytes,
        correlation_id: str,
        *,
        partition: int,
        wants_ack: bool,
        timeout: float,
    ) -> AckFuture:
        """Send a framed request now, from this thread; the future resolves with its ack.

        Raises:
            ClientClosedError: after :meth:`close`.
            PublishQueueFullError: ``max_in_flight`` pending and no slot within the
                enqueue timeout.
        """
        if self._closing:
            raise ClientClosedError("publisher is closed")
        if len(framed) > self._max_message:
            raise self._too_large(len(framed))
        if self._thread is None:
            self._start_thread()
        future: AckFuture = PublishFuture()
        entry = _Entry(
            framed,
            correlation_id,
            partition,
            wants_ack,
            future,
            timeout,
            self._clock() + timeout,
        )
        self._enter((entry,))
        return future

    def submit_value(
        self,
        stream: str,
        value: bytes,
        partition: int,
        ack_policy: AckPolicy,
        timeout: float,
        direct: bool = False,
    ) -> AckFuture:
        """:meth:`submit` for the common case, everything inline: a value (``bytes``) to a
        partition, no key, headers, expected offset or own correlation id. ``direct``: the
        caller waits for the ack next (``publish``), so it writes on its own thread.

        Raises:
            ConfigurationError: a bad stream name or ack policy (before anything is sent).
            ClientClosedError, PublishQueueFullError: as :meth:`submit`.
        """
        if self._closing:
            raise ClientClosedError("publisher is closed")
        framed, correlation_id = frame_id(
            head(stream, partition, ack_policy), value, self._id_prefix, next(self._ids)
        )
        if len(framed) > self._max_message:
            raise self._too_large(len(framed))
        wants_ack = ack_policy is not AckPolicy.NONE
        future: AckFuture = PublishFuture()
        deadline = self._clock() + timeout
        pending = self._pending
        with self._send_lock:
            stream_ = self._live
            if (
                stream_ is not None
                and len(pending) < self._max_in_flight
                and not self._finished
                and correlation_id not in pending
            ):
                entry = _Entry(
                    framed, correlation_id, partition, wants_ack, future, timeout, deadline
                )
                entry.seq = self._seq = next(self._seqs)
                pending[correlation_id] = entry
                expiry = self._expiry.get(timeout)
                if expiry is None:
                    expiry = self._expiry[timeout] = collections.deque()
                expiry.append(entry)
                stream_.send_framed(framed, None if wants_ack else correlation_id, direct)
                if deadline < self._sleep_until:
                    self._inbox.put(_WAKE)
                return future
        # Not connected yet, full, or closing: the general path.
        if self._thread is None:
            self._start_thread()
        self._enter(
            (_Entry(framed, correlation_id, partition, wants_ack, future, timeout, deadline),)
        )
        return future

    def submit_many(
        self,
        requests: Sequence[tuple[bytes, str, int, bool]],
        *,
        timeout: float,
    ) -> list[AckFuture]:
        """:meth:`submit` for ``(framed, correlation_id, partition, wants_ack)`` tuples.

        In order; as many at a time as ``max_in_flight`` leaves room for (one lock and
        one write per group).

        Raises:
            ClientClosedError: after :meth:`close` (nothing of the batch was sent).
            PublishQueueFullError: as :meth:`submit`; the futures of what was sent
                before are attached to the error as ``futures``.
        """
        if self._closing:
            raise ClientClosedError("publisher is closed")
        if self._thread is None:
            self._start_thread()
        futures: list[AckFuture] = []
        entries: list[_Entry] = []
        limit = self._max_message
        for framed, _, _, _ in requests:
            if len(framed) > limit:
                raise self._too_large(len(framed))
        deadline = self._clock() + timeout
        add_future = futures.append
        add_entry = entries.append
        for framed, correlation_id, partition, wants_ack in requests:
            future: AckFuture = PublishFuture()
            add_future(future)
            add_entry(
                _Entry(framed, correlation_id, partition, wants_ack, future, timeout, deadline)
            )
        entered = 0
        try:
            entered = self._enter(entries)
        except (ClientClosedError, PublishQueueFullError) as exc:
            entered = getattr(exc, "entered", 0)
            if not entered:
                raise
            # Part of the batch is on its way: the rest fails with the same error.
            settle([self._failure(e, exc) for e in entries[entered:]], self._failures_ledger)
        return futures

    def _too_large(self, size: int) -> MessageTooLargeError:
        return MessageTooLargeError(
            f"message is {size - 5:,} bytes on the wire; the server accepts at most "
            f"{self._max_message - 5:,} (the gRPC message limit; a larger request would "
            "end the whole publish stream)",
            code="TOO_LARGE",
        )

    def _enter(self, entries: Sequence[_Entry]) -> int:
        """Enter ``entries`` in the pending table and send them, in order.

        Raises:
            ClientClosedError, PublishQueueFullError: with ``entered`` set on the error
                to the number of entries that were entered before.
        """
        pending = self._pending
        limit = self._max_in_flight
        start = 0
        total = len(entries)
        try:
            while start < total:
                with self._send_lock:
                    if self._finished:
                        raise ClientClosedError("publisher is closed")
                    room = limit - len(pending)
                    if room > 0:
                        end = min(total, start + room)
                        self._enter_locked(entries, start, end)
                        start = end
                        continue
                self._wait_for_space()
        except (ClientClosedError, PublishQueueFullError) as exc:
            vars(exc)["entered"] = start
            raise
        return total

    def _enter_locked(self, entries: Sequence[_Entry], start: int, end: int) -> None:
        pending = self._pending
        stream = self._live
        earliest = _INF
        seqs = self._seqs
        expiry = self._expiry
        batch: list[bytes] = []  # acked requests, written together
        for i in range(start, end):
            entry = entries[i]
            correlation_id = entry.correlation_id
            if correlation_id in pending:
                error = ConfigurationError(f"correlation id {correlation_id!r} in use")
                settle((self._failure(entry, error),), self._failures_ledger)
                continue
            entry.seq = next(seqs)
            pending[correlation_id] = entry
            queue_ = expiry.get(entry.timeout)
            if queue_ is None:
                queue_ = expiry[entry.timeout] = collections.deque()
            queue_.append(entry)
            if entry.deadline < earliest:
                earliest = entry.deadline
            if stream is not None:
                if entry.wants_ack:
                    batch.append(entry.framed)
                else:
                    # AckPolicy.NONE: the server never answers a success, so the publish
                    # is done once the transport has written it (a StreamSent event).
                    if batch:
                        stream.send_many(batch)
                        batch = []
                    stream.send_framed(entry.framed, correlation_id)
        if end > start:
            self._seq = entries[end - 1].seq
        if batch and stream is not None:
            stream.send_many(batch)
        if stream is None:
            self._inbox.put(_KICK)
        elif earliest < self._sleep_until:
            self._inbox.put(_WAKE)

    def check_can_wait(self) -> None:
        """Refuse, before anything is sent, a blocking call that could not wait here.

        A done-callback runs on the publisher thread; a blocking call there processes
        events while it waits, nesting one level per callback. Past the limit the call
        fails *before* its message is sent, so a failure never hides a stored message.

        Raises:
            PublishError: the nesting limit is reached.
        """
        if self._nesting >= _MAX_NESTING and self._on_owner_thread():
            raise PublishError(_TOO_DEEP)

    def _wait_for_space(self) -> None:
        enqueue_timeout = self._options.enqueue_timeout
        deadline = None if enqueue_timeout is None else self._clock() + enqueue_timeout
        if self._on_owner_thread():
            # A done-callback publishing: blocking here would stop the very thread that
            # frees slots, so keep processing events while waiting.
            acquired = self._run_nested(self._has_room, deadline)
        else:
            acquired = self._wait_until(self._has_room, deadline)
        if not acquired:
            raise PublishQueueFullError(
                f"{self._max_in_flight} publishes in flight and no slot freed within "
                f"{enqueue_timeout}s (max_in_flight / enqueue_timeout)"
            )

    def _has_room(self) -> bool:
        return len(self._pending) < self._max_in_flight or self._finished

    def _wait_until(self, ready: Callable[[], bool], deadline: float | None) -> bool:
        """Block (not on the owner thread) until ``ready()``; False at ``deadline``."""
        with self._space:
            # The owner changes what ``ready`` reads *before* it looks at _blocked; we
            # count ourselves in *before* we look at ``ready``: no wake-up is lost.
            self._blocked += 1
            try:
                while not ready():
                    if deadline is None:
                        self._space.wait()
                        continue
                    remaining = deadline - self._clock()
                    if remaining <= 0 or not self._space.wait(remaining):
                        if not ready():
                            return False
                return True
            finally:
                self._blocked -= 1

    def _wake_waiters(self) -> None:
        if self._blocked:
            with self._space:
                self._space.notify_all()

    def _start_thread(self) -> None:
        with self._lock:
            if self._closing:
                raise ClientClosedError("publisher is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="liftbridge-publisher", daemon=True
                )
                self._thread.start()

    def wait(
        self, future: concurrent.futures.Future[Ack | None], timeout: float | None
    ) -> Ack | None:
        """Wait for ``future``; on the owner thread, process events meanwhile."""
        if self._on_owner_thread() and not future.done():
            deadline = None if timeout is None else self._clock() + timeout
            self._run_nested(future.done, deadline)
            if not future.done():
                raise TimeoutError("publish did not complete in time")
        return future.result(timeout=timeout)

    @staticmethod
    def outcomes(futures: Sequence[AckFuture]) -> list[Ack | None | LiftbridgeError]:
        """Each resolved future's ack, or its error (marked observed: it is returned)."""
        result: list[Ack | None | LiftbridgeError] = []
        add = result.append
        for future in futures:
            error = future._exception
            if error is None:
                add(future._result)
                continue
            if future.ledger is not None:
                future.ledger.observed(future)
            add(error if isinstance(error, LiftbridgeError) else ClientClosedError(str(error)))
        return result

    def wait_done(self, future: AckFuture) -> None:
        """Wait until ``future`` has resolved (its own deadline bounds the wait)."""
        if future.done():
            return
        if self._on_owner_thread():
            self._run_nested(future.done, None)
        else:
            concurrent.futures.wait((future,))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish submitted so far has resolved or failed.

        Raises:
            TimeoutError: if some are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: if publishes failed since the previous flush
                and nobody called ``result()`` or ``exception()`` on their futures.
        """
        upto = self._seq

        def flushed() -> bool:
            # ``_pending`` is in sequence order (insertion order; re-sends keep it).
            while True:
                try:
                    oldest = next(iter(self._pending.values()), None)
                except RuntimeError:  # changed by another thread meanwhile
                    continue
                return oldest is None or oldest.seq > upto or self._finished

        if not flushed():
            deadline = None if timeout is None else self._clock() + timeout
            if self._on_owner_thread():
                done = self._run_nested(flushed, deadline)
            else:
                done = self._wait_until(flushed, deadline)
            if not done:
                left = sum(1 for e in list(self._pending.values()) if e.seq <= upto)
                raise TimeoutError(f"{left} publishes still pending after {timeout}s")
        count, errors = self._failures_ledger.take()
        if count:
            raise UnobservedPublishFailuresError(count=count, errors=errors)

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting publishes, wait for pending acks, fail what is left. Idempotent.

        Args:
            timeout: Seconds to wait for pending acks (``None``: until each times out);
                what is still pending then fails with :class:`ClientClosedError`.
        """
        with self._lock:
            already = self._closing
            self._closing = True
            thread = self._thread
        if thread is None:
            return
        if not already:
            deadline = None if timeout is None else self._clock() + timeout
            self._inbox.put(_Close(deadline))
        if threading.current_thread() is not thread:
            thread.join()

    # ------------------------------------------------------------------ owner thread

    def _run(self) -> None:
        try:
            while not (self._close_requested and self._drained()):
                self._step(self._plan())
        except BaseException:  # pragma: no cover - a bug must not leave futures hanging
            _log.exception("publisher thread crashed; failing pending publishes")
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
        self._sleep_until = _INF
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
        upcoming = [c for c in (head, self._reconnect_at, self._close_deadline) if c is not None]
        if not upcoming:
            return None
        until = min(upcoming)
        self._sleep_until = until
        return max(0.0, until - now)

    def _expire(self, now: float) -> float | None:
        """Fail publishes past their deadline; the earliest deadline still to come."""
        pending = self._pending
        earliest: float | None = None
        timed_out: list[_Outcome] = []
        for queue_ in list(self._expiry.values()):
            while queue_:
                entry = queue_[0]
                if pending.get(entry.correlation_id) is not entry:
                    queue_.popleft()  # resolved
                    continue
                if entry.deadline <= now:
                    queue_.popleft()
                    if pending.pop(entry.correlation_id, None) is not entry:
                        continue  # the stream's thread resolved it just now
                    what = "no ack" if entry.wants_ack else "not sent"
                    error = AckTimeoutError(f"{what} within {entry.timeout}s")
                    timed_out.append(self._failure(entry, error))
                    continue
                if earliest is None or entry.deadline < earliest:
                    earliest = entry.deadline
                break
        if len(self._expiry) > 16:
            with self._send_lock:
                for key in [k for k, q in self._expiry.items() if not q]:
                    del self._expiry[key]
        if timed_out:
            settle(timed_out, self._failures_ledger)
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
        if self._reconnect_at is not None and self._clock() >= self._reconnect_at:
            self._reconnect_at = None
            if self._pending:
                self._connect()

    def _on_stream_event(self, event: object) -> None:
        """Stream events arrive here on the stream's thread.

        Plain acks of futures without done-callbacks are resolved right here (a
        ``publish()`` waiting for one wakes without a hop through the publisher thread);
        everything else goes to the publisher thread's inbox.
        """
        responses: Sequence[_Response]
        if type(event) is StreamResponses and event.epoch == self._epoch:
            responses = event.responses
        elif type(event) is StreamResponse and event.epoch == self._epoch:
            responses = [event.response]
        else:
            self._inbox.put(event)
            return
        self._failures = 0  # the stream works (reconnect back-off starts afresh)
        rest = self._resolve_plain(responses)
        if rest:
            # Only this (the current stream's) thread counts up, only the owner down.
            self._forwarded += 1
            self._inbox.put(_Forwarded(event.epoch, rest))

    def _resolve_plain(self, responses: Sequence[_Response]) -> list[_Response]:
        """Resolve successful acks of callback-less futures; the responses left over."""
        if self._forwarded != self._handled:
            # The owner has responses of this stream still to handle: keep the order
            # (an error and then an ack for the same message must be seen in turn).
            return list(responses)
        pending = self._pending
        # C speedups: the leading run of plain acks resolved in one call.
        taken_now = settle_acks(responses, pending) if type(responses) is list else 0
        if taken_now:
            self._wake_waiters()
            if taken_now == len(responses):
                return []
            responses = responses[taken_now:]
        rest: list[_Response] = []
        taken: list[tuple[_Entry, _Response]] = []
        outcomes: list[tuple[PublishFuture[Any], Any]] = []
        for response in responses:
            if isinstance(response, Ack):  # decoded by the C reader: a successful ack
                entry = pending.get(response.correlation_id) if not rest else None
                if entry is None or entry.future._done_callbacks:
                    rest.append(response)
                    continue
                set_ack_partition(response, entry.partition)
                taken.append((entry, response))
                outcomes.append((entry.future, response))
                continue
            ack = response.ack
            correlation_id = ack.correlationId
            entry = pending.get(correlation_id) if correlation_id and not rest else None
            if entry is None or ack.ackError or entry.future._done_callbacks:
                rest.append(response)
                continue
            taken.append((entry, response))
            outcomes.append((entry.future, ack_from_proto(ack, entry.partition)))
        if outcomes:
            # Resolve first (the future's state decides who did: the owner may be timing
            # it out right now), then take the entries out of the pending table.
            skipped = settle_plain(outcomes)
            for i in skipped:
                rest.append(taken[i][1])  # a callback was added meanwhile: the owner
            if skipped:
                taken = [t for i, t in enumerate(taken) if i not in set(skipped)]
            for entry, _ in taken:
                if pending.get(entry.correlation_id) is entry:
                    pending.pop(entry.correlation_id, None)
            self._wake_waiters()
        return rest

    def _run_nested(self, until: Callable[[], bool], deadline: float | None) -> bool:
        if self._nesting >= _MAX_NESTING:
            raise PublishError(_TOO_DEEP)
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
        if type(event) is _Forwarded:
            if event.epoch == self._epoch:
                self._on_responses(event.responses)
            self._handled += 1
        elif isinstance(event, StreamResponses):
            if event.epoch == self._epoch:
                self._failures = 0
                self._on_responses(event.responses)
        elif isinstance(event, StreamResponse):
            if event.epoch == self._epoch:
                self._failures = 0
                self._on_responses((event.response,))
        elif event is _WAKE:
            pass  # _plan() looks at the new deadlines
        elif event is _KICK:
            if self._stream is None and self._reconnect_at is None and self._pending:
                self._connect()
        elif isinstance(event, StreamSent):
            entry = self._pending.get(event.correlation_id)
            if event.epoch == self._epoch and entry is not None and not entry.wants_ack:
                del self._pending[event.correlation_id]
                settle(((entry.future, None, None),))
                self._wake_waiters()
        elif isinstance(event, StreamClosed):
            if event.epoch == self._epoch:
                self._on_stream_closed(event.error)
        elif isinstance(event, _Close):
            self._close_requested = True
            self._close_deadline = event.deadline

    def _connect(self) -> None:
        addresses = self._core.addresses()
        address = addresses[self._epoch % len(addresses)]
        self._epoch += 1
        try:
            stream = self._opener(self._core, address, self._epoch, self._on_stream_event)
        except ClientClosedError as exc:
            self._fail_all(exc)
            return
        except LiftbridgeError as exc:
            # A transport that connects eagerly (h2) fails here instead of with an event.
            self._stream = None
            self._on_stream_closed(exc)
            return
        self._stream = stream
        with self._send_lock:
            entries = list(self._pending.values())
            if entries:
                _log.info(
                    "publish stream %d open on %s; sending %d", self._epoch, address, len(entries)
                )
            for entry in entries:
                stream.send_framed(entry.framed, None if entry.wants_ack else entry.correlation_id)
            if not self._finished:
                self._live = stream

    def _on_stream_closed(self, error: LiftbridgeError | None) -> None:
        with self._send_lock:
            self._live = None
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.join(1.0)
        if not self._pending:
            return  # reopen lazily on the next publish
        if error is not None and not error.retryable:
            _log.warning("publish stream failed: %s", error)
            self._fail_all(error)
            return
        # Keep reconnecting while anything is pending: each entry's own deadline bounds
        # how long it waits, so giving up earlier would only fail work that may succeed.
        self._failures += 1
        policy = self._options.retry
        delay = min(policy.maximum, policy.initial * 2 ** min(self._failures - 1, 30))
        delay += random.uniform(0, policy.jitter)
        _log.warning(
            "publish stream broke (%s); reconnecting in %.3fs, then re-sending %d",
            error or "ended by server",
            delay,
            len(self._pending),
        )
        self._reconnect_at = self._clock() + delay

    def _on_responses(self, responses: Sequence[_Response]) -> None:
        pending = self._pending
        # C speedups: the leading run of plain acks popped and resolved in one call;
        # their callbacks run in settle() below, first.
        taken_now, resolved = take_acks(responses, pending) if type(responses) is list else (0, [])
        if taken_now:
            responses = responses[taken_now:]
        outcomes: list[_Outcome] = []
        append = outcomes.append
        for response in responses:
            if isinstance(response, Ack):  # decoded by the C reader: a successful ack
                entry = pending.pop(response.correlation_id, None)
                if entry is not None:
                    set_ack_partition(response, entry.partition)
                    append((entry.future, response, None))
                continue
            ack = response.ack
            correlation_id = ack.correlationId
            if not correlation_id:
                # An asyncError (or an ack without an id): the id is on the response.
                if response.HasField("asyncError"):
                    entry = pending.pop(response.correlationId, None)
                    if entry is not None:
                        error = response.asyncError
                        failure = error_from_async_error(error.code, error.message)
                        outcomes.append(self._failure(entry, failure))
                    continue
                correlation_id = response.correlationId
            # A PERMISSION_DENIED error can be followed by an ack for the same id (server
            # quirk): the entry is gone by then, so the ack is ignored.
            entry = pending.pop(correlation_id, None)
            if entry is None:
                continue
            if ack.ackError:
                failure = error_from_ack_error(_ACK_ERRORS.get(ack.ackError, "UNKNOWN"))
                outcomes.append(self._failure(entry, failure))
            else:
                append((entry.future, ack_from_proto(ack, entry.partition), None))
        if outcomes or taken_now:
            settle(outcomes, self._failures_ledger, resolved)
            self._wake_waiters()

    @staticmethod
    def _failure(entry: _Entry, error: BaseException) -> _Outcome:
        return (entry.future, None, error)

    def _fail_all(self, error: BaseException) -> None:
        entries = list(self._pending.values())
        self._pending.clear()
        settle([self._failure(e, error) for e in entries], self._failures_ledger)
        self._wake_waiters()

    def _shutdown(self) -> None:
        with self._send_lock:
            self._finished = True
            self._live = None
        self._fail_all(ClientClosedError("publisher closed before the ack arrived"))
        self._expiry.clear()
        stream, self._stream = self._stream, None
        if stream is not None:
            # Half-close first so that requests already queued are written, then give
            # the server a moment to end the call before aborting it.
            stream.close()
            stream.join(2.0)
            stream.cancel()
            stream.join(5.0)
