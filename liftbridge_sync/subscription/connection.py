"""The Subscribe call of one partition: opened, reopened after failover, or found over.

:class:`PartitionConnection` is the connecting part of
:class:`~liftbridge_sync.subscription.Subscription`, which holds one: where to subscribe
(the leader, or a random in-sync replica), the request that continues after the last
delivered offset, retries under the client's policy within ``resubscribe_wait``, the
server's empty handshake message, and what a failed attempt means (a restarting server,
a deleted stream, nothing left to read). Where to subscribe and the time its look-ups
get are :mod:`~liftbridge_sync.subscription.lookup`'s; what a refusal means is
:mod:`~liftbridge_sync.subscription.refusals`'s. Not thread-safe by itself: only the
iterating thread connects; the call is handed over under the connection's lock, which
``close()`` takes.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync._runtime.scheduler import Scheduler, TimerHandle
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.opening import SubscribeCall, open_subscribe
from liftbridge_sync._transport.retry import backoff_delay, build_retrying, is_retryable
from liftbridge_sync._wire.validate import offset_after
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    ServerError,
    StreamDeletedError,
    WaitTimeoutError,
)
from liftbridge_sync.options import RetryPolicy
from liftbridge_sync.subscription.lookup import (
    ATTEMPT_AT_LEAST,
    PartitionLookup,
    at_least_a_moment,
    left_of,
)
from liftbridge_sync.subscription.refusals import (
    Closed,
    Ended,
    ReadTimeout,
    RefusalExplainer,
    open_failure,
)
from liftbridge_sync.subscription.target import SubscriptionTarget

#: ATTEMPT_AT_LEAST, Closed and SubscriptionTarget are named here too, where they were
#: first defined.
__all__ = ["ATTEMPT_AT_LEAST", "Closed", "PartitionConnection", "SubscriptionTarget"]


class PartitionConnection:
    """The connecting part of a subscription: its call, opened and reopened, and the
    state of the read that its other parts share (the last delivered offset, whether
    the read is done, the counters of ``stats()``).

    A :class:`~liftbridge_sync.subscription.partition.Subscription` holds one, and a
    :class:`~liftbridge_sync.subscription.read_failures.ReadFailures` that reads and
    writes its state. Not thread-safe by itself: the iterating thread connects and owns
    the state; :meth:`close` (any thread) takes the call under :attr:`lock`.
    """

    def __init__(self, core: ClientCore, target: SubscriptionTarget) -> None:
        self.core = core
        self.target = target
        self.lock = threading.Lock()
        self.closed = threading.Event()
        #: Aborted by :meth:`close`: ends the metadata look-ups of the iterating thread
        #: (their RPCs, back-offs and waits), which nothing else wakes.
        self.abort = DialAbort()
        self._lookup = PartitionLookup(core, target, self.abort)
        self._refusals = RefusalExplainer(core, target, self._lookup)
        self.call: SubscribeCall | None = None
        self.done = False
        #: The read ended because nothing more is there for it (its stop reached, a
        #: read-only partition read to its end, an empty range), not by a close of
        #: either side or a failure.
        self.nothing_left = False
        self.last_offset: int | None = None
        #: When the stream was lost (None: not lost, or lost by our own timeout cancel).
        self.broken_since: float | None = None
        #: Whether the cached leader may be wrong (the stream broke, not timed out).
        self.stale = False
        #: Whether the current call reads from the partition's leader (with
        #: ``read_isr_replica`` it may be a follower).
        self.at_leader = True
        #: Read from the leader from now on, even with ``read_isr_replica``: a follower
        #: was silent about offsets the leader has committed (it may lag; see
        #: ``_rest_is_gone``).
        self.leader_only = False
        self._scheduler: Scheduler = core.scheduler()
        #: Whether the current call hands out messages in batches (``read_batch``).
        self.batched = False
        #: Calls dropped in a row for out-of-order messages (0 once one arrives in order).
        self.disorder = 0
        #: Streams lost in a row without a message in between (0 once one arrives):
        #: from the second on, a resubscribe waits for the retry back-off first.
        self.lost = 0
        #: Counters for ``stats()`` (written by the iterating thread only).
        self.resubscribes = 0
        self.out_of_order = 0
        self.misaddressed = 0

    def close(self) -> None:
        """Mark the read closed, cancel the call and end a metadata look-up under way.
        Idempotent; any thread.

        In a forked child the call is only dropped: cancelling it would shut down the
        socket the parent still reads from.
        """
        if self.core.forked:
            self.call = None
            self.closed.set()
            return
        with self.lock:
            self.closed.set()
            call, self.call = self.call, None
        if call is not None:
            call.cancel()
        self.abort.abort()

    def finish(self, call: SubscribeCall) -> None:
        """The read is over (its end, or its stop position, reached): drop ``call``."""
        self.done = True
        self.forget(call)
        call.cancel()

    def forget(self, call: SubscribeCall) -> None:
        """Stop reading from ``call`` (ended, refused or interrupted), unless a reconnect
        already replaced it; the caller cancels it. Any thread."""
        with self.lock:
            if self.call is call:
                self.call = None

    def arm(self, delay: float, call: SubscribeCall) -> TimerHandle:
        """Cancel ``call`` after ``delay`` seconds unless the returned timer is cancelled."""
        try:
            return self._scheduler.call_later(delay, call.cancel)
        except ClientClosedError:
            # The client is closing and closes this subscription too; do not wait for it.
            # (What the subscription read in bulk is delivered by then: a timer is armed
            # only once it is.)
            self.close()
            raise Closed from None

    # ------------------------------------------------------------------ connecting

    def _resume_request(self) -> api_pb2.SubscribeRequest:
        """The request that continues after the last delivered offset."""
        original = self.target.request
        last = self.last_offset
        if last is None:
            return original
        request = api_pb2.SubscribeRequest()
        request.CopyFrom(original)
        request.startPosition = api_pb2.OFFSET
        request.startOffset = (
            last - 1 if self.target.reverse else offset_after(last, "the last message read")
        )
        return request

    def _exhausted(self) -> bool:
        """Whether the last delivered offset already reached the end of the read."""
        last = self.last_offset
        if last is None:
            return False
        if self.target.reverse:
            return last <= 0
        request = self.target.request
        return request.stopPosition == api_pb2.STOP_OFFSET and last >= request.stopOffset

    def _connect(
        self,
        policy: RetryPolicy,
        deadline: float | None,
        *,
        resubscribing: bool,
        until: float | None = None,
    ) -> None:
        """Open the stream and consume the handshake, retrying under ``policy`` (and,
        with ``until``, the ``time.monotonic()`` ``resubscribe_wait`` ends at, keeping the
        look-ups of each attempt to it)."""
        if self.done:
            raise StopIteration
        if self._exhausted():  # the stop was delivered just before the stream broke
            self.done = self.nothing_left = True
            raise StopIteration
        refresh = self.stale
        target = self.target
        label = f"subscribe {target.stream}/{target.partition} after offset {self.last_offset}"
        retrying = build_retrying(policy, label=label, retry_if=is_retryable).copy(
            sleep=lambda seconds: self._backoff(seconds, deadline)
        )
        try:
            for trial in retrying:
                with trial:
                    if self.closed.is_set():
                        raise Closed
                    # One end for the whole attempt: its look-up, the handshake and
                    # the question of what a refusal means (not rpc_timeout each).
                    ends = self._lookup.attempt_ends(until)
                    try:
                        self._open(
                            refresh, deadline, resubscribing=resubscribing, until=until, ends=ends
                        )
                    except (NotLeaderError, BrokerUnavailableError):
                        refresh = True
                        raise
                    except NoSuchPartitionError as exc:
                        refresh = True
                        asked = at_least_a_moment(deadline)
                        raise self._refusals.not_found(exc, asked, until, ends) from None
                    except ServerError as exc:
                        # v1.9.0 refuses a reader of a paused partition with the same
                        # "segment has been closed" as one caught mid-compaction; only
                        # the metadata tells the lasting case from the passing one.
                        if exc.retryable and not target.request.resume:
                            paused = self.paused(at_least_a_moment(deadline), until, ends)
                            if paused is not None:
                                raise paused from None
                        raise
                    return
        except Ended:
            self.done = self.nothing_left = True
            raise StopIteration from None
        except (NoSuchStreamError, NoSuchPartitionError) as exc:
            if not resubscribing:
                raise
            self.done = True
            raise StreamDeletedError(
                f"stream {self.target.stream!r} was deleted: {exc}",
                code=exc.code,
                details=exc.details,
            ) from None
        except LiftbridgeError as exc:
            if resubscribing:
                self.done = True
                missing_since = self._refusals.missing_since
                if missing_since is not None and isinstance(exc, BrokerUnavailableError):
                    # resubscribe_wait ran out while fresh metadata lacked the stream:
                    # longer than a restarted server takes to list it again.
                    raise StreamDeletedError(
                        f"stream {self.target.stream!r} was deleted: it has been missing "
                        f"from the metadata for {time.monotonic() - missing_since:.1f}s "
                        f"({exc})",
                        code="NOT_FOUND",
                    ) from None
            raise

    def connect_first(self, deadline: float | None = None) -> None:
        """The first connect, under the client's retry policy (and by ``deadline``, a
        ``time.monotonic()``, if given: its look-ups, handshakes and back-offs keep to
        it, as a resubscribe's keep to its ``get`` timeout).

        A server whose cleaner is swapping segments refuses new readers ("segment has
        been closed") for as long as its pass over the log lasts, which on a big log
        outlasts the retry policy: that refusal alone goes on being retried for up to
        ``resubscribe_wait``, as it would be on a running subscription.

        Raises:
            ReadTimeout: ``deadline`` passed first.
        """
        options = self.core.options
        started = time.monotonic()
        policy = options.retry
        while True:
            try:
                self._connect(policy, deadline, resubscribing=False)
                return
            except ServerError as exc:
                left = options.resubscribe_wait - (time.monotonic() - started)
                if not exc.retryable or left <= 0:
                    raise
                policy = dataclasses.replace(policy, max_attempts=1_000_000, max_delay=left)

    def paused(
        self, deadline: float | None, until: float | None = None, ends: float | None = None
    ) -> PartitionPausedError | None:
        """The error to raise if fresh metadata says the partition is paused (see
        :meth:`.RefusalExplainer.paused`).

        Raises:
            ClientClosedError: closed meanwhile (or the client).
        """
        return self._refusals.paused(deadline, until, ends)

    def _backoff(self, seconds: float, deadline: float | None) -> None:
        # In slices (wait_event): on the main thread, a Ctrl-C the kernel gave another
        # thread is handled within one, not after a back-off of up to RetryPolicy.maximum.
        if deadline is not None and time.monotonic() + seconds > deadline:
            # Keep the broken state: the next read goes on resubscribing.
            if wait_event(self.closed, max(0.0, deadline - time.monotonic())):
                raise Closed  # woken by close(): the read ends, it did not time out
            raise ReadTimeout
        wait_event(self.closed, seconds)

    def reconnect(self, deadline: float | None) -> SubscribeCall:
        """Resubscribe after the last offset within what is left of ``resubscribe_wait``."""
        options = self.core.options
        since = self.broken_since if self.broken_since is not None else time.monotonic()
        until = since + options.resubscribe_wait
        remaining = until - time.monotonic()
        policy = dataclasses.replace(
            options.retry, max_attempts=1_000_000, max_delay=max(0.0, remaining)
        )
        try:
            if self.disorder and not self.done:
                self._back_off_disorder(remaining, deadline)
            elif self.lost > 1 and not self.done:
                # Lost again before any message: a server that takes every call and
                # fails it at once must not be called in a tight loop.
                delay = backoff_delay(options.retry, self.lost - 1)
                self._backoff(min(max(0.0, remaining), delay), deadline)
            self._connect(policy, deadline, resubscribing=True, until=until)
        except Closed:
            raise StopIteration from None
        except ReadTimeout:
            raise WaitTimeoutError("no message arrived within the timeout") from None
        except Exception:
            if self.closed.is_set():
                # Closing (or closing the client) broke the attempt in flight.
                raise StopIteration from None
            raise
        self.resubscribes += 1
        self._refusals.missing_since = None
        if not self.disorder:
            # Out-of-order answers keep the clock running until a message in order
            # arrives: a server that only ever answers so must not loop for ever.
            self.broken_since = None
        self.stale = False
        call = self.call
        if call is None:  # closed right after connecting
            raise StopIteration
        return call

    def _back_off_disorder(self, remaining: float, deadline: float | None) -> None:
        """Wait before resubscribing after refused messages (out of order, or of
        another stream or partition), or give up.

        Raises:
            ServerError: the server answered so for all of ``resubscribe_wait``.
        """
        if remaining <= 0:
            self.done = True
            raise ServerError(
                f"subscription {self.target.stream}/{self.target.partition}: the server "
                f"kept sending messages to refuse (offsets at or below the last delivered "
                f"one, {self.last_offset}, or another stream's or partition's) for "
                f"{self.core.options.resubscribe_wait}s"
            )
        self._backoff(
            min(remaining, backoff_delay(self.core.options.retry, self.disorder)), deadline
        )

    def _open(
        self,
        refresh: bool,
        deadline: float | None,
        *,
        resubscribing: bool,
        until: float | None = None,
        ends: float | None = None,
    ) -> None:
        """One attempt: send Subscribe and consume the server's empty handshake message.

        With ``until`` (a resubscribe), the whole attempt ends by ``ends``
        (:meth:`.PartitionLookup.attempt_ends`) at most: its look-up and the handshake
        together, not one ``rpc_timeout`` each.
        """
        deadline = at_least_a_moment(deadline)
        if ends is None:
            ends = self._lookup.attempt_ends(until)
        address, self.at_leader = self._lookup.address(
            refresh, deadline, until, ends, leader_only=self.leader_only
        )
        # Reverse reads check every offset as it is delivered: one at a time.
        call = open_subscribe(
            self.core, address, self._resume_request(), batched=not self.target.reverse
        )
        handshaken = False
        try:
            with self.lock:
                if self.closed.is_set():
                    raise Closed
                self.call = call  # close() cancels it from here on
                self.batched = call.batched
            wait = self.core.options.rpc_timeout
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if ends is not None:
                # At least a moment: a look-up that took it all leaves a handshake that
                # is already under way its chance, as a deadline does (ATTEMPT_AT_LEAST).
                wait = min(wait, left_of(ends))
            guard = self.arm(wait, call)
            try:
                next(call)
            except StopIteration:
                raise Ended from None
            except LiftbridgeError as exc:
                self._open_failed(exc, address, guard, deadline, resubscribing=resubscribing)
            finally:
                guard.cancel()
            handshaken = True
        finally:
            if not handshaken:
                # Failed, ended, or interrupted (a Ctrl-C raised at any call) before its
                # handshake was taken: a call left in place would hand the handshake
                # out as a message (offset 0, empty) at the next read.
                self.forget(call)
                call.cancel()

    def _open_failed(
        self,
        exc: LiftbridgeError,
        address: str,
        guard: TimerHandle,
        deadline: float | None,
        *,
        resubscribing: bool,
    ) -> None:
        if self.closed.is_set():
            raise Closed
        raise open_failure(
            exc,
            address,
            timed_out=guard.fired,
            deadline=deadline,
            reverse=self.target.reverse,
            resubscribing=resubscribing,
        )
