"""Subscriptions: a blocking iterator over one stream partition.

A :class:`Subscription` reads its gRPC stream on the caller's thread (through the channel
with single-threaded streaming reads) and starts no thread of its own. A blocked read is
bounded by the client's shared ``liftbridge-timer`` thread, which cancels the gRPC call
when ``get(timeout)`` expires; the next read then resubscribes from ``last_offset + 1``,
so a timeout loses and repeats nothing.

The first request is built (and its moment-dependent positions pinned) by
:mod:`liftbridge_sync.subscription.opening`; opening and reopening the call (broker
choice, retries, the handshake, deletion or restart) is
:mod:`liftbridge_sync.subscription.connection`'s. This module delivers the messages.
Thread-safe as :class:`Subscription` says.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.scheduler import TimerHandle
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.status import (
    CallContext,
    error_from_rpc_error,
)
from liftbridge_sync._wire.validate import check_timeout
from liftbridge_sync.errors import (
    ClientClosedError,
    UnsupportedError,
)
from liftbridge_sync.models import Message, _set_message_pb
from liftbridge_sync.models import _new_object as _new_message
from liftbridge_sync.subscription.connection import (
    Closed,
    PartitionConnection,
    SubscriptionTarget,
)

__all__ = ["Subscription", "SubscriptionTarget"]

_log = logging.getLogger("liftbridge_sync.subscription")
_SC = grpc.StatusCode


class Subscription(PartitionConnection):
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
        super().__init__(core, target)
        #: Wire messages read in bulk (h2 transport) and the index of the next one; the
        #: iterating thread's only, except close(), which empties it.
        self._buf: list[api_pb2.Message] = []
        self._pos = 0

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
        except Closed:
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

    def read_positions(self) -> list[tuple[str, int, int | None, str]]:
        """``[(stream, partition, last_offset, "subscription")]`` while open (for stats)."""
        if self.closed:
            return []
        return [(self.stream, self.partition, self._last_offset, "subscription")]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed.is_set()

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> Message:
        buf = self._buf
        i = self._pos
        if i < len(buf) and not self._core.forked:
            # Fast path: a message already read in bulk (by this process: a forked
            # child must not hand out what the parent delivers too).
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
        if i < len(buf) and not self._core.forked:
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
        """End the subscription; a blocked read ends with ``StopIteration``. Idempotent.

        In a forked child the call is only dropped: cancelling it would shut down the
        socket the parent still reads from.
        """
        if self._core.forked:
            self._call = None
            self._buf = []
            self._closed.set()
            return
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
        self._core.refuse_if_forked(f"the subscription to {self._target.stream!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            call = self._call
            if call is None:
                call = self._reconnect(deadline)
            timer: TimerHandle | None = None
            if deadline is not None:
                try:
                    timer = self._arm(deadline - time.monotonic(), call)
                except Closed:
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


def _is_eof(exc: grpc.RpcError) -> bool:
    return (exc.details() or "").strip().lower() == "eof"
