"""Subscriptions: a blocking iterator over one stream partition.

A :class:`Subscription` reads its gRPC stream on the caller's thread (through the channel
with single-threaded streaming reads) and starts no thread of its own. A blocked read is
bounded by the client's shared ``liftbridge-timer`` thread, which cancels the gRPC call
when ``get(timeout)`` expires; the next read then resubscribes from ``last_offset + 1``,
so a timeout loses and repeats nothing.

The first request is built (and its moment-dependent positions pinned) by
:mod:`liftbridge_sync.subscription.opening`.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from typing import Any

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.scheduler import Scheduler, TimerHandle
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import build_retrying, is_retryable
from liftbridge_sync._wire.status import (
    CallContext,
    error_from_rpc_error,
)
from liftbridge_sync._wire.validate import check_timeout
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    ForkedClientError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    StreamDeletedError,
    UnsupportedError,
)
from liftbridge_sync.models import Message, _set_message_pb
from liftbridge_sync.models import _new_object as _new_message
from liftbridge_sync.options import RetryPolicy

__all__ = ["Subscription", "SubscriptionTarget"]

_log = logging.getLogger("liftbridge_sync.subscription")
_SC = grpc.StatusCode
#: Server details of INTERNAL when a reverse read finds an empty log.
_EMPTY_LOG_HINTS = ("segment not found", "empty")
#: Server details of INVALID_ARGUMENT when the stop offset is already behind us.
_STOP_BEFORE_START = "stop offset is before start offset"


class _Ended(Exception):
    """The server says there is nothing (more) to read."""


class _Closed(Exception):
    """The subscription was closed while connecting."""


class _ReadTimeout(Exception):
    """The caller's ``get`` deadline passed while connecting."""


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionTarget:
    """What to read; fixed for the life of the subscription.

    Immutable (the request is never mutated; resubscribes copy it).
    """

    stream: str
    partition: int
    #: The original request, with moment-dependent positions already pinned.
    request: api_pb2.SubscribeRequest
    read_isr_replica: bool
    reverse: bool


class Subscription:
    """Iterate messages of one partition; resubscribes after failover from last_offset + 1.

    Use it as an iterator (``for msg in sub``) and a context manager. :meth:`get` waits at
    most ``timeout`` seconds. After a lost connection, a broker restart or a leader
    change, the subscription transparently reconnects (to the current leader, or a random
    in-sync replica) for up to ``ClientOptions.resubscribe_wait`` seconds and continues
    after the last delivered offset, with no gap and no duplicate. Terminal conditions
    raise at the point of iteration: :class:`~liftbridge_sync.errors.StreamDeletedError`,
    :class:`~liftbridge_sync.errors.PartitionPausedError`,
    :class:`~liftbridge_sync.errors.PermissionDeniedError`. A stop position, the end of a
    read-only partition or :meth:`close` end the iteration with ``StopIteration``.

    Not thread-safe for iteration; close() may be called from any thread.
    """

    close_accepts_timeout = False

    def __init__(self, core: ClientCore, target: SubscriptionTarget) -> None:
        self._core = core
        self._target = target
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._call: Any = None
        self._done = False
        self._last_offset: int | None = None
        #: When the stream was lost (None: not lost, or lost by our own timeout cancel).
        self._broken_since: float | None = None
        #: Whether the cached leader may be wrong (the stream broke, not timed out).
        self._stale = False
        self._scheduler: Scheduler = core.scheduler()
        #: Wire messages read in bulk (h2 transport) and the index of the next one; the
        #: iterating thread's only, except close(), which empties it.
        self._buf: list[api_pb2.Message] = []
        self._pos = 0
        #: Whether the current call hands out messages in batches (``read_batch``).
        self._batched = False

    def open(self, *, empty: bool) -> None:
        """Connect for the first time (``empty``: there is nothing to read at all).

        Raises:
            ClientClosedError: if closed while opening.
        """
        if empty:
            self._done = True
            return
        try:
            self._connect(self._core.options.retry, None, resubscribing=False)
        except StopIteration:
            pass  # nothing to read: an empty, finished subscription
        except _Closed:
            raise ClientClosedError("subscription closed while opening") from None

    # ------------------------------------------------------------------ public API

    @property
    def stream(self) -> str:
        """The stream name."""
        return self._target.stream

    @property
    def partition(self) -> int:
        """The partition id."""
        return self._target.partition

    @property
    def last_offset(self) -> int | None:
        """Offset of the last delivered message, ``None`` before the first one."""
        return self._last_offset

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed.is_set()

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> Message:
        buf = self._buf
        i = self._pos
        if i < len(buf):
            # Fast path: a message already read in bulk.
            self._pos = i + 1
            pb = buf[i]
            self._last_offset = pb.offset
            msg = _new_message(Message)  # Message.from_proto without its call frame
            _set_message_pb(msg, pb)
            return msg
        return self._read(None)

    def get(self, timeout: float | None = None) -> Message:
        """The next message, waiting at most ``timeout`` seconds (``None``: forever).

        Raises:
            TimeoutError: if no message arrived in time; the subscription stays usable
                and the next read continues after the last delivered offset.
            StopIteration: if the subscription has ended or was closed.
            StreamDeletedError, PartitionPausedError, PermissionDeniedError: terminal
                conditions reported by the server.
        """
        seconds = check_timeout("timeout", timeout)
        buf = self._buf
        i = self._pos
        if i < len(buf):
            self._pos = i + 1
            pb = buf[i]
            self._last_offset = pb.offset
            return Message.from_proto(pb)
        return self._read(seconds)

    def checkpoint(self, cursor_id: str) -> int | None:
        """Store the last delivered offset under ``cursor_id`` (the Go client's semantics).

        Resume later with ``start=StartAt.cursor(cursor_id)``.

        Returns:
            The stored offset, or ``None`` when nothing was delivered yet (nothing stored).
        """
        offset = self._last_offset
        if offset is None:
            return None
        self._core.set_cursor(cursor_id, self._target.stream, self._target.partition, offset)
        return offset

    def close(self) -> None:
        """End the subscription; a blocked read ends with ``StopIteration``. Idempotent."""
        with self._lock:
            self._closed.set()
            call, self._call = self._call, None
            self._buf = []  # messages read but not delivered are dropped
        if call is not None:
            call.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "ended" if self._done else "open"
        return (
            f"<Subscription {self._target.stream}/{self._target.partition} "
            f"last_offset={self._last_offset} {state}>"
        )

    # ------------------------------------------------------------------ reading

    def _read(self, timeout: float | None) -> Message:
        if self._core.forked:
            raise ForkedClientError(
                "this subscription was opened before the process forked; subscribe again "
                "in the child (the client itself reconnects there)"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            call = self._call
            if call is None:
                call = self._reconnect(deadline)
            timer: TimerHandle | None = None
            if deadline is not None:
                try:
                    timer = self._arm(deadline - time.monotonic(), call)
                except _Closed:
                    raise StopIteration from None
            try:
                if self._batched:
                    batch = call.read_batch()
                    if self._closed.is_set():
                        raise StopIteration
                    batch = self._after_last(batch)
                    if not batch:
                        continue
                    self._buf = batch
                    self._pos = 1
                    pb = batch[0]
                else:
                    pb = next(call)
                    if not self._after_last([pb]):
                        continue
            except StopIteration:
                # The server closed the stream with OK: it will send nothing more.
                self._finish(call)
                raise
            except grpc.RpcError as exc:
                self._on_broken(call, exc, timer)
                continue
            finally:
                if timer is not None:
                    timer.cancel()
            offset = pb.offset
            last = self._last_offset
            if self._target.reverse and last is not None and offset > last:
                self._finish(call)
                raise UnsupportedError(
                    "the server does not support reverse subscriptions: it delivered offset "
                    f"{offset} after {last} (servers up to v1.9.0 ignore 'reverse')"
                )
            self._last_offset = offset
            return Message.from_proto(pb)

    def _after_last(self, batch: list[api_pb2.Message]) -> list[api_pb2.Message]:
        """``batch`` without messages at or before the last delivered offset.

        A resubscribe asks for ``last_offset + 1``, but a server that has just restarted
        (its high watermark not yet re-learnt) can answer from the start of the log; what
        was delivered already is dropped here, so a restart never repeats a message.
        """
        last = self._last_offset
        if not batch or last is None or self._target.reverse or batch[0].offset > last:
            return batch
        fresh = [m for m in batch if m.offset > last]
        _log.warning(
            "subscription %s/%d: the server re-sent %d message(s) at or before offset %d; skipped",
            self._target.stream,
            self._target.partition,
            len(batch) - len(fresh),
            last,
        )
        return fresh

    def _arm(self, delay: float, call: Any) -> TimerHandle:
        """Cancel ``call`` after ``delay`` seconds unless the returned timer is cancelled."""
        try:
            return self._scheduler.call_later(delay, call.cancel)
        except ClientClosedError:
            # The client is closing and closes this subscription too; do not wait for it.
            self.close()
            raise _Closed from None

    def _finish(self, call: Any) -> None:
        self._done = True
        with self._lock:
            if self._call is call:
                self._call = None
        call.cancel()

    def _on_broken(self, call: Any, exc: grpc.RpcError, timer: TimerHandle | None) -> None:
        """Decide what a failed read means; returns only if a resubscribe should follow."""
        with self._lock:
            if self._call is call:
                self._call = None
        if self._closed.is_set():
            raise StopIteration
        code = exc.code()
        if timer is not None and timer.fired and code is _SC.CANCELLED:
            # Our own cancel: the connection is fine, so the next read resubscribes
            # without asking for metadata, with a fresh resubscribe budget.
            raise TimeoutError("no message arrived within the timeout")
        if code is _SC.RESOURCE_EXHAUSTED:
            # End of a read-only partition, or the stop position was delivered.
            self._done = True
            raise StopIteration
        if self._target.reverse and code is _SC.UNKNOWN and _is_eof(exc):
            self._done = True
            raise StopIteration
        if code is _SC.CANCELLED:
            # A cancel we did not ask for, e.g. a get() timer that fired just as its
            # message arrived: quietly continue after the last offset.
            return
        error = error_from_rpc_error(exc, CallContext.SUBSCRIPTION)
        if code is _SC.UNAVAILABLE or error.retryable:
            _log.warning(
                "subscription %s/%d lost its stream (%s); resubscribing after offset %s",
                self._target.stream,
                self._target.partition,
                error,
                self._last_offset,
            )
            self._broken_since = time.monotonic()
            self._stale = True
            return
        self._done = True
        raise error

    # ------------------------------------------------------------------ connecting

    def _resume_request(self) -> api_pb2.SubscribeRequest:
        """The request that continues after the last delivered offset."""
        original = self._target.request
        last = self._last_offset
        if last is None:
            return original
        request = api_pb2.SubscribeRequest()
        request.CopyFrom(original)
        request.startPosition = api_pb2.OFFSET
        request.startOffset = last - 1 if self._target.reverse else last + 1
        return request

    def _exhausted(self) -> bool:
        """Whether the last delivered offset already reached the end of the read."""
        last = self._last_offset
        if last is None:
            return False
        if self._target.reverse:
            return last <= 0
        request = self._target.request
        return request.stopPosition == api_pb2.STOP_OFFSET and last >= request.stopOffset

    def _connect(self, policy: RetryPolicy, deadline: float | None, *, resubscribing: bool) -> None:
        """Open the stream and consume the handshake, retrying under ``policy``."""
        if self._done or self._exhausted():
            self._done = True
            raise StopIteration
        refresh = self._stale
        target = self._target
        label = f"subscribe {target.stream}/{target.partition} after offset {self._last_offset}"
        retrying = build_retrying(policy, label=label, retry_if=is_retryable).copy(
            sleep=lambda seconds: self._backoff(seconds, deadline)
        )
        try:
            for trial in retrying:
                with trial:
                    if self._closed.is_set():
                        raise _Closed
                    try:
                        self._open(refresh, deadline, resubscribing=resubscribing)
                    except (NotLeaderError, BrokerUnavailableError):
                        refresh = True
                        raise
                    except NoSuchPartitionError as exc:
                        refresh = True
                        raise self._explain_not_found(exc, deadline) from None
                    return
        except _Ended:
            self._done = True
            raise StopIteration from None
        except (NoSuchStreamError, NoSuchPartitionError) as exc:
            if not resubscribing:
                raise
            self._done = True
            raise StreamDeletedError(
                f"stream {self._target.stream!r} was deleted: {exc}",
                code=exc.code,
                details=exc.details,
            ) from None
        except LiftbridgeError:
            if resubscribing:
                self._done = True
            raise

    def _explain_not_found(
        self, exc: NoSuchPartitionError, deadline: float | None
    ) -> LiftbridgeError:
        """What a NOT_FOUND answer means, asked of fresh metadata.

        A restarted server answers NOT_FOUND while it recovers its partitions, so the
        answer alone never ends a subscription: only metadata without the stream (or
        the partition) confirms a deletion. A stream the metadata still lists is retried.
        """
        target = self._target
        try:
            self._core.refresh_once([target.stream], deadline)
        except BrokerUnavailableError as unreachable:
            return unreachable  # retryable: ask again on the next attempt
        snapshot = self._core.metadata.get()
        if target.stream not in snapshot.streams:
            return NoSuchStreamError(
                f"no such stream: {target.stream!r}", code=exc.code, details=exc.details
            )
        if snapshot.partition(target.stream, target.partition) is None:
            return exc
        return BrokerUnavailableError(
            f"partition {target.stream!r}/{target.partition} is not served yet "
            f"(the server is recovering it): {exc}",
            code=exc.code,
            details=exc.details,
        )

    def _backoff(self, seconds: float, deadline: float | None) -> None:
        if deadline is not None and time.monotonic() + seconds > deadline:
            # Keep the broken state: the next read goes on resubscribing.
            self._closed.wait(max(0.0, deadline - time.monotonic()))
            raise _ReadTimeout
        self._closed.wait(seconds)

    def _reconnect(self, deadline: float | None) -> Any:
        """Resubscribe after the last offset within what is left of ``resubscribe_wait``."""
        options = self._core.options
        since = self._broken_since if self._broken_since is not None else time.monotonic()
        remaining = options.resubscribe_wait - (time.monotonic() - since)
        policy = dataclasses.replace(
            options.retry, max_attempts=1_000_000, max_delay=max(0.0, remaining)
        )
        try:
            self._connect(policy, deadline, resubscribing=True)
        except _Closed:
            raise StopIteration from None
        except _ReadTimeout:
            raise TimeoutError("no message arrived within the timeout") from None
        except Exception:
            if self._closed.is_set():
                # Closing (or closing the client) broke the attempt in flight.
                raise StopIteration from None
            raise
        self._broken_since = None
        self._stale = False
        call = self._call
        if call is None:  # closed right after connecting
            raise StopIteration
        return call

    def _address(self, refresh: bool, deadline: float | None) -> str:
        """Where to subscribe: the leader, or a random in-sync replica if allowed."""
        target, core = self._target, self._core
        if refresh:
            core.refresh_once([target.stream], deadline)
            snapshot = core.metadata.get()
            info = snapshot.partition(target.stream, target.partition)
            if info is None:
                raise NoSuchPartitionError(
                    f"no such partition: stream {target.stream!r} partition {target.partition}",
                    code="NOT_FOUND",
                )
        else:
            info = core.partition_info(target.stream, target.partition, refresh=False)
            snapshot = core.metadata.get()
        if target.read_isr_replica:
            brokers = [b for b in map(snapshot.broker, info.isr) if b is not None]
            if brokers:
                return random.choice(brokers).address
        return core.leader_address_of(info)

    def _open(self, refresh: bool, deadline: float | None, *, resubscribing: bool) -> None:
        """One attempt: send Subscribe and consume the server's empty handshake message."""
        address = self._address(refresh, deadline)
        options = self._core.options
        if options.subscribe_transport == "h2":
            from liftbridge_sync._transport import h2_subscribe  # noqa: PLC0415 (h2 is optional)

            call = h2_subscribe.open_call(address, self._resume_request(), options)
            # Reverse reads check every offset as it is delivered: one at a time.
            batched = not self._target.reverse
        else:
            stub = self._core.pool.stub(address, streaming_reads=True)
            call = stub.Subscribe(self._resume_request())
            batched = False
        with self._lock:
            if self._closed.is_set():
                call.cancel()
                raise _Closed
            self._call = call
            self._batched = batched
        wait = self._core.options.rpc_timeout
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        guard = self._arm(wait, call)
        try:
            next(call)
        except StopIteration:
            raise _Ended from None
        except grpc.RpcError as exc:
            with self._lock:
                if self._call is call:
                    self._call = None
            self._open_failed(exc, address, guard, deadline, resubscribing=resubscribing)
        finally:
            guard.cancel()

    def _open_failed(
        self,
        exc: grpc.RpcError,
        address: str,
        guard: TimerHandle,
        deadline: float | None,
        *,
        resubscribing: bool,
    ) -> None:
        if self._closed.is_set():
            raise _Closed
        code = exc.code()
        if guard.fired and code is _SC.CANCELLED:
            if deadline is not None and time.monotonic() >= deadline:
                raise _ReadTimeout
            raise BrokerUnavailableError(f"subscribe: no handshake from {address} in time")
        if code is _SC.CANCELLED:
            raise BrokerUnavailableError(f"subscribe: call to {address} was cancelled")
        if code is _SC.RESOURCE_EXHAUSTED:
            raise _Ended  # STOP_LATEST on an empty partition, or nothing left to read
        details = (exc.details() or "").lower()
        if self._target.reverse and code is _SC.INTERNAL and _has(details, _EMPTY_LOG_HINTS):
            raise _Ended
        if resubscribing and code is _SC.INVALID_ARGUMENT and _STOP_BEFORE_START in details:
            raise _Ended  # the stop position was delivered just before the stream broke
        raise error_from_rpc_error(exc, CallContext.SUBSCRIBE_OPEN) from None


def _has(text: str, hints: tuple[str, ...]) -> bool:
    return any(hint in text for hint in hints)


def _is_eof(exc: grpc.RpcError) -> bool:
    return (exc.details() or "").strip().lower() == "eof"
