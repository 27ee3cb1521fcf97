"""The Subscribe call of one partition: opened, reopened after failover, or found over.

:class:`PartitionConnection` is the connecting part of
:class:`~liftbridge_sync.subscription.Subscription`, which holds one: where to subscribe
(the leader, or a random in-sync replica), the request that continues after the last
delivered offset, retries under the client's policy within ``resubscribe_wait``, the
server's empty handshake message, and what a failed attempt means (a restarting server, a deleted
stream, nothing left to read). Not thread-safe by itself: only the iterating thread
connects; the call is handed over under the connection's lock, which ``close()`` takes.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync._runtime.scheduler import Scheduler, TimerHandle
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.leader import leader_address_of, partition_info
from liftbridge_sync._transport.opening import SubscribeCall, open_subscribe
from liftbridge_sync._transport.retry import (
    Budget,
    backoff_delay,
    build_retrying,
    is_retryable,
)
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    DeadlineExceededError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    ReadonlyPartitionError,
    ServerError,
    StreamDeletedError,
)
from liftbridge_sync.options import RetryPolicy

__all__ = ["ATTEMPT_AT_LEAST", "Closed", "PartitionConnection", "SubscriptionTarget"]

#: The least one resubscribe attempt gets for its metadata look and the server's
#: handshake, whatever is left of the ``get(timeout)`` it runs in (``rpc_timeout``
#: bounds each otherwise). Cut at once, a ``get(0)`` polling loop after a lost
#: connection subscribed again and again without ever reading a message.
ATTEMPT_AT_LEAST = 0.05

#: Server details of INTERNAL when a reverse read finds an empty log.
_EMPTY_LOG_HINTS = ("segment not found", "empty")
#: Server details of INVALID_ARGUMENT when the stop offset is already behind us.
_STOP_BEFORE_START = "stop offset is before start offset"


class _Ended(Exception):
    """The server says there is nothing (more) to read."""


class Closed(Exception):
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
    #: ``StopAt.timestamp()`` of a forward read in Unix ns: the subscription ends before
    #: the first message stamped later (the request stops at the newest offset).
    stop_timestamp_ns: int | None = None
    #: ``StartAt.timestamp()`` of a forward read in Unix ns, the request pinned to the
    #: first committed offset at or after it: messages stamped earlier (written but not
    #: committed when it was pinned) are skipped until one is delivered.
    start_timestamp_ns: int | None = None

    @property
    def start_offset(self) -> int | None:
        """The first offset a forward read asked for (``None``: not an offset start).

        An offset, cursor, or pinned ``new_only()``/``latest()`` start.
        """
        request = self.request
        if self.reverse or request.startPosition != api_pb2.OFFSET:
            return None
        return int(request.startOffset)

    @property
    def stop_offset(self) -> int | None:
        """The last offset a forward read may deliver (``None``: no stop offset)."""
        request = self.request
        if self.reverse or request.stopPosition != api_pb2.STOP_OFFSET:
            return None
        return int(request.stopOffset)


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
        #: When fresh metadata first lacked the stream during the resubscribe under way
        #: (None: it did not, or listed it again since); see ``_explain_not_found``.
        self.missing_since: float | None = None

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
        request.startOffset = last - 1 if self.target.reverse else last + 1
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
                    ends = self._attempt_ends(until)
                    try:
                        self._open(
                            refresh, deadline, resubscribing=resubscribing, until=until, ends=ends
                        )
                    except (NotLeaderError, BrokerUnavailableError):
                        refresh = True
                        raise
                    except NoSuchPartitionError as exc:
                        refresh = True
                        asked = _at_least_a_moment(deadline)
                        raise self._explain_not_found(exc, asked, until, ends) from None
                    except ServerError as exc:
                        # v1.9.0 refuses a reader of a paused partition with the same
                        # "segment has been closed" as one caught mid-compaction; only
                        # the metadata tells the lasting case from the passing one.
                        if exc.retryable and not target.request.resume:
                            paused = self.paused(_at_least_a_moment(deadline), until, ends)
                            if paused is not None:
                                raise paused from None
                        raise
                    return
        except _Ended:
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
                if self.missing_since is not None and isinstance(exc, BrokerUnavailableError):
                    # resubscribe_wait ran out while fresh metadata lacked the stream:
                    # longer than a restarted server takes to list it again.
                    raise StreamDeletedError(
                        f"stream {self.target.stream!r} was deleted: it has been missing "
                        f"from the metadata since {time.monotonic() - self.missing_since:.1f}s "
                        f"ago ({exc})",
                        code="NOT_FOUND",
                    ) from None
            raise

    def connect_first(self) -> None:
        """The first connect, under the client's retry policy.

        A server whose cleaner is swapping segments refuses new readers ("segment has
        been closed") for as long as its pass over the log lasts, which on a big log
        outlasts the retry policy: that refusal alone goes on being retried for up to
        ``resubscribe_wait``, as it would be on a running subscription.
        """
        options = self.core.options
        started = time.monotonic()
        policy = options.retry
        while True:
            try:
                self._connect(policy, None, resubscribing=False)
                return
            except ServerError as exc:
                left = options.resubscribe_wait - (time.monotonic() - started)
                if not exc.retryable or left <= 0:
                    raise
                policy = dataclasses.replace(policy, max_attempts=1_000_000, max_delay=left)

    def paused(
        self, deadline: float | None, until: float | None = None, ends: float | None = None
    ) -> PartitionPausedError | None:
        """The error to raise if fresh metadata says the partition is paused.

        Asked within ``deadline`` (the get's) and ``until`` (the end of a resubscribe's
        ``resubscribe_wait``; a read that broke on a pause gives now: one attempt's
        time), as :meth:`_address` asks, and by ``ends`` (the end of the resubscribe
        attempt that met the refusal, :meth:`_attempt_ends`) if given. With neither, each
        broker may take ``rpc_timeout``.

        Raises:
            ClientClosedError: closed meanwhile (or the client).
        """
        target = self.target
        try:
            self._refresh(deadline, until, ends)
        except BrokerUnavailableError:
            return None  # cannot tell: keep retrying the refusal as transient
        info = self.core.metadata.get().partition(target.stream, target.partition)
        if info is None or not info.paused:
            return None
        return PartitionPausedError(
            f"partition {target.stream!r}/{target.partition} is paused: subscribe with "
            "resume=True to resume it (command line: --resume), or publish to it"
        )

    def _explain_not_found(
        self,
        exc: NoSuchPartitionError,
        deadline: float | None,
        until: float | None,
        ends: float | None,
    ) -> LiftbridgeError:
        """What a NOT_FOUND answer means, asked of fresh metadata (within ``deadline``,
        ``until`` and ``ends``, as :meth:`paused` asks).

        A restarted server answers NOT_FOUND while it recovers its partitions, so the
        answer alone never ends a subscription: only metadata without the stream (or
        the partition) confirms a deletion. A stream the metadata still lists is retried.
        The answer replaces what the cache held of the stream, dropping it if absent: a
        stream deleted by another client stayed listed, and its deletion was retried as
        a recovering partition for all of ``resubscribe_wait``. A restarted server
        answers without its streams too until it has recovered them, so on a resubscribe
        (``until`` given) an absence confirms the deletion only once it lasted the retry
        policy's ``max_delay`` (longer than a restart takes, as the publishing path
        judges), or at the end of ``resubscribe_wait`` (:meth:`_connect`); a stream this
        client deleted itself (no longer cached, not by this check) is gone at once.
        """
        target = self.target
        listed = target.stream in self.core.metadata.get().streams
        try:
            self._refresh(deadline, until, ends, drop_unknown=True)
        except BrokerUnavailableError as unreachable:
            return unreachable  # retryable: ask again on the next attempt
        snapshot = self.core.metadata.get()
        if target.stream not in snapshot.streams:
            now = time.monotonic()
            if until is not None and (listed or self.missing_since is not None):
                if self.missing_since is None:
                    self.missing_since = now
                if now - self.missing_since < self.core.options.retry.max_delay:
                    return BrokerUnavailableError(
                        f"stream {target.stream!r} is missing from the metadata (deleted, "
                        f"or the server is recovering it): {exc}",
                        code=exc.code,
                        details=exc.details,
                    )
            return NoSuchStreamError(
                f"no such stream: {target.stream!r}", code=exc.code, details=exc.details
            )
        self.missing_since = None
        if snapshot.partition(target.stream, target.partition) is None:
            return exc
        return BrokerUnavailableError(
            f"partition {target.stream!r}/{target.partition} is not served yet "
            f"(the server is recovering it): {exc}",
            code=exc.code,
            details=exc.details,
        )

    def _refresh(
        self,
        deadline: float | None,
        until: float | None,
        ends: float | None = None,
        *,
        drop_unknown: bool = False,
    ) -> None:
        """Refresh the stream's metadata once, within :meth:`_lookup_budget`'s time
        (with ``drop_unknown``, the cache drops the stream unless the answer has it).

        Raises:
            BrokerUnavailableError: no broker answered in time.
            ClientClosedError: closed meanwhile (or the client).
        """
        budget = self._lookup_budget(deadline, until, ends)
        self.core.refresh_once(
            [self.target.stream],
            None if budget is None else budget.ends,
            drop_unknown=drop_unknown,
            abort=self.abort,
        )

    def _backoff(self, seconds: float, deadline: float | None) -> None:
        # In slices (wait_event): on the main thread, a Ctrl-C the kernel gave another
        # thread is handled within one, not after a back-off of up to RetryPolicy.maximum.
        if deadline is not None and time.monotonic() + seconds > deadline:
            # Keep the broken state: the next read goes on resubscribing.
            if wait_event(self.closed, max(0.0, deadline - time.monotonic())):
                raise Closed  # woken by close(): the read ends, it did not time out
            raise _ReadTimeout
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
        except _ReadTimeout:
            raise TimeoutError("no message arrived within the timeout") from None
        except Exception:
            if self.closed.is_set():
                # Closing (or closing the client) broke the attempt in flight.
                raise StopIteration from None
            raise
        self.resubscribes += 1
        self.missing_since = None
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
        """Wait before resubscribing after out-of-order messages, or give up.

        Raises:
            ServerError: the server answered out of order for all of ``resubscribe_wait``.
        """
        if remaining <= 0:
            self.done = True
            raise ServerError(
                f"subscription {self.target.stream}/{self.target.partition}: the server "
                f"kept sending offsets at or below the last delivered one "
                f"({self.last_offset}) for {self.core.options.resubscribe_wait}s"
            )
        self._backoff(
            min(remaining, backoff_delay(self.core.options.retry, self.disorder)), deadline
        )

    def _address(
        self, refresh: bool, deadline: float | None, until: float | None, ends: float | None
    ) -> str:
        """Where to subscribe: the leader, or a random in-sync replica if allowed (and
        no follower was found lagging).

        The look-up keeps to ``deadline`` (the get's), to ``until`` (the end of
        ``resubscribe_wait``) and to ``ends`` (its attempt's end, one ``rpc_timeout``
        past ``until`` at most).
        """
        target, core = self.target, self.core
        budget = self._lookup_budget(deadline, until, ends)
        if refresh:
            self._refresh(deadline, until, ends)
            snapshot = core.metadata.get()
            info = snapshot.partition(target.stream, target.partition)
            if info is None:
                raise NoSuchPartitionError(
                    f"no such partition: stream {target.stream!r} partition {target.partition}",
                    code="NOT_FOUND",
                )
        else:
            # A partition the cache lacks is looked up within the budget: under the
            # whole retry policy it held get(timeout), or a resubscribe past
            # resubscribe_wait, for that policy.
            try:
                info = partition_info(
                    core, target.stream, target.partition, refresh=False, budget=budget
                )
            except DeadlineExceededError as exc:
                if budget is None:
                    raise
                # Retried: if the get's time ran out, the back-off before the retry ends
                # the get with TimeoutError (the read goes on); if resubscribe_wait's,
                # the retry policy (max_delay: what was left of it) gives up.
                raise BrokerUnavailableError(
                    f"subscribe: looking the partition's leader up failed: {exc}"
                ) from exc
            snapshot = core.metadata.get()
        leader = leader_address_of(core, info)
        if target.read_isr_replica and not self.leader_only:
            brokers = [b for b in map(snapshot.broker, info.isr) if b is not None]
            if brokers:
                address = random.choice(brokers).address
                self.at_leader = address == leader
                return address
        self.at_leader = True
        return leader

    def _attempt_ends(self, until: float | None) -> float | None:
        """When a resubscribe attempt starting now ends at the latest (``None``: not a
        resubscribe): one ``rpc_timeout`` past ``until``, or past its own start if later,
        as the resubscribe's own retry policy makes at least one attempt."""
        if until is None:
            return None
        return max(until, time.monotonic()) + self.core.options.rpc_timeout

    def _lookup_budget(
        self, deadline: float | None, until: float | None, ends: float | None = None
    ) -> Budget | None:
        """The budget of one metadata look-up (``None``: the retry policy's) within
        ``ends``, the end of the attempt it is part of (:meth:`_attempt_ends`; one
        starting now without it). A look-up late in its attempt still gets
        ``ATTEMPT_AT_LEAST``: it is already under way and must be able to answer."""
        abort = self.abort
        if until is not None:
            now = time.monotonic()
            if ends is None:
                ends = max(until, now) + self.core.options.rpc_timeout
            ends = max(ends, now + ATTEMPT_AT_LEAST)
            if deadline is None:
                return Budget(until, ends, abort=abort)
            return Budget(min(deadline, until), min(deadline, ends), abort=abort)
        return None if deadline is None else Budget(deadline, deadline, abort=abort)

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
        (:meth:`_attempt_ends`) at most: its look-up and the handshake together, not
        one ``rpc_timeout`` each.
        """
        if deadline is not None:
            deadline = max(deadline, time.monotonic() + ATTEMPT_AT_LEAST)
        if ends is None:
            ends = self._attempt_ends(until)
        address = self._address(refresh, deadline, until, ends)
        # Reverse reads check every offset as it is delivered: one at a time.
        call = open_subscribe(
            self.core, address, self._resume_request(), batched=not self.target.reverse
        )
        with self.lock:
            if self.closed.is_set():
                call.cancel()
                raise Closed
            self.call = call
            self.batched = call.batched
        wait = self.core.options.rpc_timeout
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        if ends is not None:
            # At least a moment: a look-up that took it all leaves a handshake that is
            # already under way its chance, as a deadline does (ATTEMPT_AT_LEAST).
            wait = min(wait, max(ends - time.monotonic(), ATTEMPT_AT_LEAST))
        guard = self.arm(wait, call)
        try:
            next(call)
        except StopIteration:
            raise _Ended from None
        except LiftbridgeError as exc:
            with self.lock:
                if self.call is call:
                    self.call = None
            self._open_failed(exc, address, guard, deadline, resubscribing=resubscribing)
        finally:
            guard.cancel()

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
        code = exc.code
        if guard.fired and code == "CANCELLED":
            if deadline is not None and time.monotonic() >= deadline:
                raise _ReadTimeout
            raise BrokerUnavailableError(f"subscribe: no handshake from {address} in time")
        if code == "CANCELLED":
            raise BrokerUnavailableError(f"subscribe: call to {address} was cancelled")
        if isinstance(exc, ReadonlyPartitionError):
            raise _Ended  # STOP_LATEST on an empty partition, or nothing left to read
        details = exc.details.lower()
        if self.target.reverse and code == "INTERNAL" and _has(details, _EMPTY_LOG_HINTS):
            raise _Ended
        if (
            code == "INVALID_ARGUMENT"
            and _STOP_BEFORE_START in details
            and (resubscribing or not self.target.reverse)
        ):
            # Nothing at or before the stop lies at or after the start: an empty range
            # (a start past the end, a stop below the oldest retained offset), or the
            # stop position was delivered just before the stream broke.
            raise _Ended
        # Already typed by the transport, as a refused open.
        raise exc


def _at_least_a_moment(deadline: float | None) -> float | None:
    """``deadline`` (a ``get`` timeout's), or ``ATTEMPT_AT_LEAST`` from now if later: the
    question of what a refusal means is part of an attempt already under way, and
    asked past a nearly spent timeout with what little is left, each broker had about
    0.01 s to answer and the refusal's meaning was lost (taken for a passing one)."""
    if deadline is None:
        return None
    return max(deadline, time.monotonic() + ATTEMPT_AT_LEAST)


def _has(text: str, hints: tuple[str, ...]) -> bool:
    return any(hint in text for hint in hints)
