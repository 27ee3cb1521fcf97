"""The publisher: one owner thread, one inbox, one ``PublishAsync`` stream.

Every publish path goes over the bidirectional ``PublishAsync`` stream (a unary Publish
without a deadline is fire-and-forget on the server). The ``liftbridge-publisher``
thread owns the stream and every piece of in-flight state; other threads only put events
in its inbox (a ``queue.SimpleQueue``: reentrant, lock-free ``put``):

* ``_Submit`` from :meth:`Publisher.submit` (any thread);
* stream events (responses, end of stream) from the stream's reader thread;
* ``_Close`` from :meth:`Publisher.close`.

The owner sends requests in the order it receives them on a single stream, so messages
for one partition keep their order. Ack timeouts come from a hashed timer wheel the owner
advances whenever it wakes: no thread or timer object per message. When the stream
breaks, the owner reopens it (rotating brokers, with back-off from the retry policy) and
re-sends every unacknowledged message in order: delivery is at-least-once. A future
always resolves or fails: at the latest when its timeout expires or the publisher closes.

Futures are resolved on the owner thread with no lock held, so their done-callbacks run
there. A callback may call ``publish``, ``publish_async``, ``flush`` or ``close``: on the
owner thread those calls keep processing events while they wait instead of blocking it.
"""

from __future__ import annotations

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
from collections.abc import Callable

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.timerwheel import TimerHandle, TimerWheel
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
from liftbridge_sync._wire.status import (
    error_from_ack_error,
    error_from_async_error,
)
from liftbridge_sync.errors import (
    AckTimeoutError,
    ClientClosedError,
    ConfigurationError,
    LiftbridgeError,
    PublishQueueFullError,
    UnobservedPublishFailuresError,
)
from liftbridge_sync.models import Ack

__all__ = ["Publisher"]

_log = logging.getLogger("liftbridge_sync.publisher")

AckFuture = concurrent.futures.Future[Ack | None]
_MAX_NESTING = 32
#: How many unobserved failures ``flush()`` quotes in its error.
_FAILURES_QUOTED = 10
_ACK_ERRORS = {1: "UNKNOWN", 2: "INCORRECT_OFFSET", 3: "TOO_LARGE", 4: "ENCRYPTION"}


class _FailureLedger:
    """Publishes that failed and that nobody has looked at yet, for ``flush()`` to report.

    Thread-safe: failures are recorded on the owner thread, observations on any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unobserved: dict[int, BaseException] = {}  # id(future) -> error, in order
        self._count = 0

    def failed(self, future: _PublishFuture, error: BaseException) -> None:
        with self._lock:
            future.ledger = self
            self._count += 1
            if len(self._unobserved) < _FAILURES_QUOTED * 100:
                self._unobserved[id(future)] = error

    def observed(self, future: _PublishFuture) -> None:
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


class _PublishFuture(concurrent.futures.Future[Ack | None]):
    """A real ``concurrent.futures.Future`` that notes when its outcome is looked at."""

    ledger: _FailureLedger | None = None

    def result(self, timeout: float | None = None) -> Ack | None:
        try:
            return super().result(timeout)
        finally:
            if self.ledger is not None and self.done():
                self.ledger.observed(self)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        finally:
            if self.ledger is not None and self.done():
                self.ledger.observed(self)


@dataclasses.dataclass(slots=True, eq=False)
class _Entry:
    request: api_pb2.PublishRequest
    future: AckFuture
    timeout: float
    deadline: float = 0.0
    handle: TimerHandle[str] | None = None

    @property
    def wants_ack(self) -> bool:
        return self.request.ackPolicy != api_pb2.NONE


@dataclasses.dataclass(frozen=True, slots=True)
class _Submit:
    entry: _Entry


@dataclasses.dataclass(frozen=True, slots=True)
class _Close:
    deadline: float | None


def _fail_submit(entry: _Entry) -> None:
    """Fail a submitted entry that the owner thread will never handle (idempotent)."""
    try:
        if entry.future.set_running_or_notify_cancel():
            entry.future.set_exception(ClientClosedError("publisher is closed"))
    except (RuntimeError, concurrent.futures.InvalidStateError):
        pass  # the other side of the race got there first


def _opener_for(transport: str) -> StreamOpener:
    if transport == "h2":
        # Imported on demand: it needs the optional h2 package.
        module = importlib.import_module("liftbridge_sync._transport.h2stream")
        opener: StreamOpener = module.open_h2_stream
        return opener
    return open_grpc_stream


class Publisher:
    """Pipelined publishing over one ``PublishAsync`` stream.

    Created by the :class:`~liftbridge_sync.Client` on first publish. Thread-safe:
    :meth:`submit`, :meth:`flush` and :meth:`close` may be called from any thread,
    including a future's done-callback.
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
        self._opener = opener or _opener_for(core.options.publish_transport)
        self._clock = clock
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._permits = threading.Semaphore(self._options.max_in_flight)
        self._lock = threading.Lock()
        self._outstanding: set[AckFuture] = set()
        self._failures_ledger = _FailureLedger()
        self._thread: threading.Thread | None = None
        self._closing = False
        #: Set by the owner thread just before its final drain of the inbox.
        self._finished = False
        self._ids = itertools.count()
        self._id_prefix = f"{os.getpid():x}.{random.getrandbits(48):012x}."
        # Owner-thread state below: touched only by the liftbridge-publisher thread.
        self._pending: dict[str, _Entry] = {}
        self._stream: PublishStream | None = None
        self._epoch = 0
        self._wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=1024, now=clock())
        self._failures = 0
        self._reconnect_at: float | None = None
        self._close_requested = False
        self._close_deadline: float | None = None
        self._nesting = 0

    # ------------------------------------------------------------------ any thread

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (prefix + counter: cheap and unique)."""
        return f"{self._id_prefix}{next(self._ids)}"

    def _on_owner_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, request: api_pb2.PublishRequest, *, timeout: float) -> AckFuture:
        """Hand a request to the owner thread; the future resolves with the ack.

        Raises:
            ClientClosedError: after :meth:`close`.
            PublishQueueFullError: ``max_in_flight`` pending and no slot within the
                enqueue timeout.
        """
        if self._closing:
            raise ClientClosedError("publisher is closed")
        self._acquire_permit()
        if self._thread is None:
            try:
                self._start_thread()
            except ClientClosedError:
                self._permits.release()
                raise
        future: AckFuture = _PublishFuture()
        future.add_done_callback(self._on_done)
        # No lock on the per-message path: set add/discard/copy are atomic under the GIL,
        # and a submit racing with close() is settled by the check below.
        self._outstanding.add(future)
        entry = _Entry(request, future, timeout)
        self._inbox.put(_Submit(entry))
        if self._finished:
            # The owner thread has drained its inbox for the last time: nobody else will
            # take this entry out of it, so fail it here (the drain may have too).
            _fail_submit(entry)
        return future

    def _acquire_permit(self) -> None:
        if self._permits.acquire(blocking=False):
            return
        enqueue_timeout = self._options.enqueue_timeout
        if self._on_owner_thread():
            # A done-callback publishing: blocking here would stop the very thread that
            # frees slots, so keep processing events while waiting.
            deadline = None if enqueue_timeout is None else self._clock() + enqueue_timeout
            acquired = self._run_nested(lambda: self._permits.acquire(blocking=False), deadline)
        else:
            acquired = self._permits.acquire(timeout=enqueue_timeout)
        if not acquired:
            raise PublishQueueFullError(
                f"{self._options.max_in_flight} publishes in flight and no slot freed within "
                f"{enqueue_timeout}s (max_in_flight / enqueue_timeout)"
            )

    def _on_done(self, future: AckFuture) -> None:
        self._permits.release()
        self._outstanding.discard(future)

    def _start_thread(self) -> None:
        with self._lock:
            if self._closing:
                raise ClientClosedError("publisher is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="liftbridge-publisher", daemon=True
                )
                self._thread.start()

    def wait(self, future: AckFuture, timeout: float | None) -> Ack | None:
        """Wait for ``future``; on the owner thread, process events meanwhile."""
        if self._on_owner_thread() and not future.done():
            deadline = None if timeout is None else self._clock() + timeout
            self._run_nested(future.done, deadline)
            if not future.done():
                raise TimeoutError("publish did not complete in time")
        return future.result(timeout=timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish submitted so far has resolved or failed.

        Raises:
            TimeoutError: if some are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: if publishes failed since the previous flush
                and nobody called ``result()`` or ``exception()`` on their futures.
        """
        waiting = self._outstanding.copy()
        if waiting:
            self._wait_all(waiting, timeout)
        count, errors = self._failures_ledger.take()
        if count:
            raise UnobservedPublishFailuresError(count=count, errors=errors)

    def _wait_all(self, waiting: set[AckFuture], timeout: float | None) -> None:
        if self._on_owner_thread():
            deadline = None if timeout is None else self._clock() + timeout
            self._run_nested(lambda: all(f.done() for f in waiting), deadline)
            remaining = [f for f in waiting if not f.done()]
        else:
            _, not_done = concurrent.futures.wait(waiting, timeout=timeout)
            remaining = list(not_done)
        if remaining:
            raise TimeoutError(f"{len(remaining)} publishes still pending after {timeout}s")

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
                self._step(self._wait_time())
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

    def _wait_time(self) -> float | None:
        candidates = [self._wheel.next_deadline(), self._reconnect_at, self._close_deadline]
        upcoming = [c for c in candidates if c is not None]
        if not upcoming:
            return None
        return max(0.0, min(upcoming) - self._clock())

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
        for correlation_id in self._wheel.advance(now):
            entry = self._pending.pop(correlation_id, None)
            if entry is not None:
                entry.handle = None
                what = "no ack" if entry.wants_ack else "not sent"
                self._fail(entry, AckTimeoutError(f"{what} within {entry.timeout}s"))
        if self._reconnect_at is not None and now >= self._reconnect_at:
            self._reconnect_at = None
            if self._pending:
                self._connect()

    def _run_nested(self, until: Callable[[], bool], deadline: float | None) -> bool:
        if self._nesting >= _MAX_NESTING:
            raise RuntimeError("publish calls nested too deeply in done-callbacks")
        self._nesting += 1
        try:
            while not until():
                if deadline is not None and self._clock() >= deadline:
                    return False
                wait = self._wait_time()
                if deadline is not None:
                    remaining = max(0.0, deadline - self._clock())
                    wait = remaining if wait is None else min(wait, remaining)
                self._step(min(wait, 0.05) if wait is not None else 0.05)
            return True
        finally:
            self._nesting -= 1

    def _handle(self, event: object) -> None:
        if isinstance(event, StreamResponses):
            if event.epoch == self._epoch:
                self._failures = 0
                for response in event.responses:
                    self._on_response(response)
        elif isinstance(event, StreamResponse):
            if event.epoch == self._epoch:
                self._failures = 0
                self._on_response(event.response)
        elif isinstance(event, _Submit):
            self._on_submit(event.entry)
        elif isinstance(event, StreamSent):
            entry = self._pending.get(event.correlation_id)
            if event.epoch == self._epoch and entry is not None and not entry.wants_ack:
                del self._pending[event.correlation_id]
                self._cancel_timer(entry)
                self._resolve(entry, None)
        elif isinstance(event, StreamClosed):
            if event.epoch == self._epoch:
                self._on_stream_closed(event.error)
        elif isinstance(event, _Close):
            self._close_requested = True
            self._close_deadline = event.deadline

    def _on_submit(self, entry: _Entry) -> None:
        if not entry.future.set_running_or_notify_cancel():
            return  # cancelled while queued; its slot was released by the callback
        if self._close_requested:
            self._fail(entry, ClientClosedError("publisher is closed"))
            return
        correlation_id = entry.request.correlationId
        if correlation_id in self._pending:
            self._fail(entry, ConfigurationError(f"correlation id {correlation_id!r} in use"))
            return
        entry.deadline = self._clock() + entry.timeout
        entry.handle = self._wheel.schedule(entry.deadline, correlation_id)
        self._pending[correlation_id] = entry
        if self._stream is None:
            if self._reconnect_at is None:
                self._connect()
            return  # sent (in order) once the stream is open
        self._send(entry)

    def _send(self, entry: _Entry) -> None:
        assert self._stream is not None
        # AckPolicy.NONE: the server never answers a success, so the publish is done once
        # the transport has written it (a StreamSent event).
        self._stream.send(entry.request, notify_sent=not entry.wants_ack)

    def _connect(self) -> None:
        addresses = self._core.addresses()
        address = addresses[self._epoch % len(addresses)]
        self._epoch += 1
        try:
            self._stream = self._opener(self._core, address, self._epoch, self._inbox.put)
        except ClientClosedError as exc:
            self._fail_all(exc)
            return
        except LiftbridgeError as exc:
            # A transport that connects eagerly (h2) fails here instead of with an event.
            self._stream = None
            self._on_stream_closed(exc)
            return
        if self._pending:
            _log.info(
                "publish stream %d open on %s; sending %d", self._epoch, address, len(self._pending)
            )
        for entry in list(self._pending.values()):
            self._send(entry)

    def _on_stream_closed(self, error: LiftbridgeError | None) -> None:
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

    def _on_response(self, response: api_pb2.PublishResponse) -> None:
        if response.HasField("asyncError"):
            entry = self._pending.pop(response.correlationId, None)
            if entry is not None:
                self._cancel_timer(entry)
                error = response.asyncError
                self._fail(entry, error_from_async_error(error.code, error.message))
            return
        ack = response.ack
        # A PERMISSION_DENIED error can be followed by an ack for the same id (server
        # quirk): the entry is gone by then, so the ack is ignored.
        entry = self._pending.pop(ack.correlationId or response.correlationId, None)
        if entry is None:
            return
        self._cancel_timer(entry)
        if ack.ackError:
            self._fail(entry, error_from_ack_error(_ACK_ERRORS.get(ack.ackError, "UNKNOWN")))
        else:
            self._resolve(entry, Ack.from_proto(ack, partition=entry.request.partition))

    def _cancel_timer(self, entry: _Entry) -> None:
        if entry.handle is not None:
            self._wheel.cancel(entry.handle)
            entry.handle = None

    def _fail_all(self, error: BaseException) -> None:
        entries = list(self._pending.values())
        self._pending.clear()
        for entry in entries:
            self._cancel_timer(entry)
            self._fail(entry, error)

    @staticmethod
    def _resolve(entry: _Entry, ack: Ack | None) -> None:
        try:
            entry.future.set_result(ack)
        except concurrent.futures.InvalidStateError:  # pragma: no cover - already done
            pass

    def _fail(self, entry: _Entry, error: BaseException) -> None:
        future = entry.future
        if isinstance(future, _PublishFuture):
            # Recorded before the callbacks run, so a callback that looks at the outcome
            # marks it observed.
            self._failures_ledger.failed(future, error)
        try:
            future.set_exception(error)
        except concurrent.futures.InvalidStateError:  # pragma: no cover - already done
            pass

    def _shutdown(self) -> None:
        self._fail_all(ClientClosedError("publisher closed before the ack arrived"))
        self._finished = True
        while True:
            try:
                event = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(event, _Submit):
                _fail_submit(event.entry)
        stream, self._stream = self._stream, None
        if stream is not None:
            # Half-close first so that requests already queued are written, then give
            # the server a moment to end the call before aborting it.
            stream.close()
            stream.join(2.0)
            stream.cancel()
            stream.join(5.0)
