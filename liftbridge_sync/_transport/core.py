"""Resilient RPCs: broker selection, deadlines, retries and the client's metadata.

Every unary call carries a deadline (``ClientOptions.rpc_timeout`` per attempt). Calls that
any broker can serve rotate over the known brokers (metadata, then seeds) and retry
``UNAVAILABLE`` under the retry policy; ``FetchMetadata``, which only reads, also goes on
to the next broker after an attempt that ran out of its deadline (a broker that takes
connections but does not answer). Calls that must reach a partition leader are in
:mod:`.leader`, those on cursors in :mod:`.cursors`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync._runtime.scheduler import Scheduler
from liftbridge_sync._runtime.throttled_log import ThrottledWarning
from liftbridge_sync._transport.aborting import DialAbort, waiting
from liftbridge_sync._transport.channels import ChannelPool
from liftbridge_sync._transport.metadata import (
    MetadataCache,
    dialable_brokers,
    translate_broker,
)
from liftbridge_sync._transport.partition_counts import PartitionCounts
from liftbridge_sync._transport.retry import (
    Attempts,
    Budget,
    call_with_retry,
    is_retryable,
    retryable_elsewhere,
)
from liftbridge_sync._transport.roster import BrokerRoster
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.rpcs import Req, Resp, Rpc
from liftbridge_sync._wire.status import CallContext, closed_at_connect, error_from_rpc_error
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    DeadlineExceededError,
    ForkedClientError,
    LiftbridgeError,
    NoSuchStreamError,
)
from liftbridge_sync.models import Metadata
from liftbridge_sync.options import ClientOptions

__all__ = ["ClientCore"]

_log = logging.getLogger("liftbridge_sync.client")

#: RPCs whose deadline is enforced by the client only (see ``_invoke_with_local_deadline``).
_LOCAL_DEADLINE_METHODS = frozenset({"FetchMetadata"})


def _close_rank(closeable: Any) -> int:
    rank: int = getattr(closeable, "close_rank", 0)
    return rank


class ClientCore:
    """Channels, metadata, RPC routing and the lifetime of everything a client opens.

    The publisher and subscriptions get this object, never the :class:`Client`, so the
    layers below the facade do not import it. Everything they open is registered here
    and closed by :meth:`close`.

    Thread-safe.
    """

    def __init__(
        self,
        options: ClientOptions,
        *,
        channel_factory: Callable[[str, list[tuple[str, Any]]], grpc.Channel] | None = None,
    ) -> None:
        self.options = options
        self.pool = ChannelPool(options, channel_factory=channel_factory)
        self.metadata = MetadataCache(
            self._fetch_metadata,
            default_budget=lambda: Budget.of(options.retry, options.rpc_timeout),
            on_brokers=self._forget_departed,
        )
        # Lambdas, not bound methods: what they call is looked up on each call.
        self._counts = PartitionCounts(
            self.metadata,
            options.metadata_max_age,
            lambda streams, deadline: self.refresh_once(streams, deadline),
            lambda stream, budget: self.stream_info_partitions(stream, refresh=True, budget=budget),
            options.retry,
            options.rpc_timeout,
            lambda seconds: self.back_off(seconds),
        )
        self._rotation = itertools.count()
        #: Brokers left out of the metadata for an address no one can dial (told every
        #: refresh, they would flood the log).
        self._undialable = ThrottledWarning(_log)
        self._lock = threading.Lock()
        self._closeables: weakref.WeakSet[Any] = weakref.WeakSet()
        #: What is remembered of each broker address: departures, TLS verdicts.
        self.roster = BrokerRoster(options, self.pool)
        self._scheduler: Scheduler | None = None
        #: Whether the WARNING that cursors are read unrevealed was logged (see
        #: :func:`.cursors.reveal_cursors`).
        self.cursors_unrevealed_told = False
        self.closed = False
        #: Set in a forked child: everything opened through this core is the parent's.
        self.forked = False

    # ------------------------------------------------------------------ lifetime

    def register(self, closeable: Any) -> None:
        """Track a publisher, subscription or timer so that :meth:`close` closes it.

        Raises:
            ClientClosedError: if already closed (``closeable`` is closed first).
        """
        with self._lock:
            if not self.closed:
                self._closeables.add(closeable)
                return
        closeable.close()
        raise ClientClosedError("client is closed")

    def unregister(self, closeable: Any) -> None:
        """Stop tracking ``closeable``: something else registered closes it now (a
        stream subscription its partitions', registered each while it opened, so that
        :meth:`close` ended its opening)."""
        with self._lock:
            self._closeables.discard(closeable)

    def holds_resources(self) -> bool:
        """Whether closing would end something: a channel, a thread, a subscription.

        Takes no lock: ``Client.__del__`` asks, and the garbage collector may run it on
        a thread that holds this core's lock.
        """
        return not self.closed and (self.pool.opened or len(self._closeables) > 0)

    def registered(self) -> list[Any]:
        """The publishers, subscriptions and consumers opened through this core and open."""
        with self._lock:
            return list(self._closeables)

    def scheduler(self) -> Scheduler:
        """The shared ``liftbridge-timer`` scheduler, created on first use.

        Raises:
            ClientClosedError: if closed.
        """
        with self._lock:
            if self.closed:
                raise ClientClosedError("client is closed")
            if self._scheduler is None:
                self._scheduler = Scheduler()
                self._closeables.add(self._scheduler)
            return self._scheduler

    def refuse_if_forked(self, what: str) -> None:
        """Raise if this is a forked child's copy of the core: ``what`` (an object opened
        through it, with threads or connections of the parent) cannot work here.

        Checked before any lock is taken: a parent thread may have held it at fork.

        Raises:
            ForkedClientError: in a process forked after ``what`` was opened.
        """
        if self.forked:
            raise ForkedClientError(
                f"{what} was opened before the process forked: its threads and "
                "connections are the parent's; open it again in the child (the client "
                "itself reconnects there)"
            )

    def abandon_after_fork(self) -> None:
        """In a forked child: everything opened through this core is the parent's.

        Publishers and subscriptions carried across the fork raise ``ForkedClientError``
        on their next RPC. Takes no lock, joins no thread (none of them exists here).
        """
        self.forked = True
        self.closed = True
        self.pool.abandon_after_fork()

    def close(self, timeout: float | None = None) -> None:
        """Close what was registered (publishes get ``timeout``), then the channels.

        In the order of their ``close_rank`` (0 if none): subscriptions, whose close
        only wakes their readers, before consumers, which commit as they close, before
        the publisher, which waits up to ``timeout`` for its acks, before the timer
        thread. In the weak set's order, a reader blocked in ``get()`` waited for the
        publisher's acks against a silent broker (30 s) before it was woken.
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True
            closeables = sorted(self._closeables, key=_close_rank)
        for closeable in closeables:
            if getattr(closeable, "close_accepts_timeout", False):
                closeable.close(timeout=timeout)
            else:
                closeable.close()
        self.pool.close()

    def back_off(self, seconds: float, abort: DialAbort | None = None) -> None:
        """Sleep a retry's back-off of ``seconds``, cut short by :meth:`close` (and by
        ``abort``, the caller's own, if given).

        A back-off lasts up to ``RetryPolicy.maximum``: in a plain sleep, a thread in a
        retried call outlived ``close()`` by that long.

        Raises:
            ClientClosedError: the client is closed, or was closed during the sleep (or
                ``abort`` aborted).
        """
        woken = threading.Event()
        try:
            with self.pool.closing.waiting(woken), waiting(abort, woken):
                wait_event(woken, seconds)
        except ClientClosedError:
            if abort is not None and abort.aborted:
                raise ClientClosedError("the caller was closed during a retry's back-off") from None
            raise ClientClosedError("the client was closed during a retry's back-off") from None

    # ------------------------------------------------------------------ brokers

    def addresses(self) -> list[str]:
        """Brokers to try: those in the cached metadata, then the seeds not among them."""
        result: list[str] = []
        snapshot = self.metadata.snapshot
        if snapshot is not None:
            result.extend(broker.address for broker in snapshot.brokers)
        result.extend(a for a in self.options.addresses if a not in result)
        return result

    def _forget_departed(self) -> None:
        """Retire the channels to brokers gone for good (see
        :meth:`.BrokerRoster.forget_departed`): called after every metadata update that
        replaced the broker list, with the latest snapshot and the timer thread if
        running (every partition subscription starts it)."""
        if not self.closed:
            self.roster.forget_departed(self.metadata.snapshot, self._scheduler)

    def invoke(
        self,
        address: str,
        rpc: Rpc[Req, Resp],
        request: Req,
        *,
        context: CallContext,
        timeout: float | None = None,
        abort: DialAbort | None = None,
    ) -> Resp:
        """One attempt of a unary RPC on one broker; gRPC errors become LiftbridgeErrors.

        ``timeout`` (default ``rpc_timeout``) bounds the whole attempt: a first TLS
        pre-flight to the broker and telling a refused plaintext connection apart
        (:meth:`error_of`) included. ``abort``, if given, cancels the call when it
        aborts (the caller closing from another thread).

        Raises:
            ClientClosedError: the client is closed, or ``abort`` aborted.
        """
        if abort is not None:
            abort.check()
        seconds = timeout or self.options.rpc_timeout
        ends = time.monotonic() + seconds
        stub = self.pool.stub(address, budget=seconds)
        deadline = ends - time.monotonic()
        if deadline <= 0:
            raise DeadlineExceededError(
                f"{rpc.name}: no answer within {seconds:g}s (the TLS pre-flight took it)",
                code="DEADLINE_EXCEEDED",
            )
        try:
            return self._invoke_on(stub, address, rpc, request, context, deadline, ends, abort)
        finally:
            self.pool.release(stub)

    def _invoke_on(
        self,
        stub: Any,
        address: str,
        rpc: Rpc[Req, Resp],
        request: Req,
        context: CallContext,
        deadline: float,
        ends: float,
        abort: DialAbort | None,
    ) -> Resp:
        method = getattr(stub, rpc.name)
        what = f"{rpc.name} to {address}"
        try:
            if rpc.name in _LOCAL_DEADLINE_METHODS:
                response: Resp = self._invoke_with_local_deadline(
                    method, request, deadline, what, abort
                )
            elif abort is not None:
                # A future, which the abort can cancel: a blocking call cannot be woken.
                response = _result(method.future(request, timeout=deadline), deadline, what, abort)
            else:
                response = method(request, timeout=deadline)
            return response
        except grpc.RpcError as exc:
            if self.closed:  # the channel was closed under the call: not the server's doing
                raise ClientClosedError(f"{rpc.name}: the client was closed") from None
            raise self.error_of(exc, context, address, ends - time.monotonic()) from None
        except ValueError:
            # grpcio's "Cannot invoke RPC: Channel closed!": close() won the race for the
            # channel between the stub's lookup and the call.
            if self.closed:
                raise ClientClosedError(f"{rpc.name}: the client was closed") from None
            raise

    def error_of(
        self,
        exc: grpc.RpcError,
        context: CallContext,
        address: str,
        budget: float | None = None,
    ) -> LiftbridgeError:
        """The typed error of a failed gRPC call to ``address`` (every gRPC path's).

        A plaintext connection the broker closed at connect is told apart by asking its
        port for TLS (:meth:`.BrokerRoster.tls_required`, within ``budget`` seconds if
        given): only a verified answer makes it a final :class:`TLSError`.
        """
        error = error_from_rpc_error(exc, context)
        if (
            self.options.tls is None
            and isinstance(error, BrokerUnavailableError)
            and closed_at_connect(error.details or "")
        ):
            return self.roster.tls_required(address, error, budget)
        return error

    @staticmethod
    def _invoke_with_local_deadline(
        rpc: Any, request: Any, deadline: float, what: str, abort: DialAbort | None
    ) -> Any:
        # The server surveys its peers for FetchMetadata until the call's deadline, or
        # for 3 s when the call has none. With a peer down, any deadline we send would be
        # used up by the survey and the answer would arrive just too late; so the wait is
        # bounded here instead and the server keeps its own shorter survey limit.
        return _result(rpc.future(request), deadline, what, abort)

    def call_any(
        self,
        rpc: Rpc[Req, Resp],
        request: Req,
        *,
        context: CallContext = CallContext.GENERIC,
        timeout: float | None = None,
        failed: list[LiftbridgeError] | None = None,
        read_only: bool = False,
        deadline: float | None = None,
        retry_until: float | None = None,
        avoid: frozenset[str] = frozenset(),
        attempts: Attempts | None = None,
        abort: DialAbort | None = None,
    ) -> Resp:
        """Call an RPC that any broker can serve, rotating brokers on retryable errors.

        ``failed``, if given, receives the error of every attempt that failed (for a
        call that is not idempotent: an attempt may have been carried out though its
        answer was lost). A ``read_only`` call also goes on to the next broker after an
        attempt that ran out of its deadline. ``timeout`` bounds each attempt;
        ``deadline`` (a ``time.monotonic()``), if given, the whole call: each attempt
        gets at most the time left, and no retry starts whose back-off would reach it
        (the last attempt's error is raised then), nor one reaching ``retry_until`` (a
        ``time.monotonic()`` too) if given. Brokers in ``avoid`` are asked only when no
        other is known. ``attempts``, if given, are those of the call this one is part
        of: each failed attempt counts there, and none is retried once they are spent.
        ``abort``, if given, ends the attempt under way and the back-offs when it aborts
        (``ClientClosedError``)."""
        start = next(self._rotation)

        def attempt(number: int) -> Resp:
            try:
                return attempt_at(number)
            except Exception:
                if attempts is not None:
                    attempts.fail()
                raise

        def attempt_at(number: int) -> Resp:
            candidates = self.addresses()
            if avoid:
                candidates = [a for a in candidates if a not in avoid] or candidates
            address = candidates[(start + number - 1) % len(candidates)]
            seconds = timeout
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceededError(
                        f"{rpc.name}: no time left for an attempt", code="DEADLINE_EXCEEDED"
                    )
                seconds = min(seconds or self.options.rpc_timeout, left)
            try:
                return self.invoke(
                    address, rpc, request, context=context, timeout=seconds, abort=abort
                )
            except LiftbridgeError as exc:
                if failed is not None:
                    failed.append(exc)
                raise

        retry_if = retryable_elsewhere if read_only else is_retryable
        ends = [t for t in (deadline, retry_until) if t is not None]
        return call_with_retry(
            self.options.retry,
            rpc.name,
            attempt,
            retry_if=retry_if,
            deadline=min(ends, default=None),
            sleep=self.back_off if abort is None else lambda s: self.back_off(s, abort),
            attempts=attempts,
        )

    # ------------------------------------------------------------------ metadata

    def _fetch_metadata(self, streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        """FetchMetadata for ``streams``, under the retry policy, or within ``budget`` (what
        is left of the call it is part of) if given."""
        request = api_pb2.FetchMetadataRequest(streams=list(streams))
        if budget is None:
            response = self.call_any(rpcs.FETCH_METADATA, request, read_only=True)
        else:
            response = self.call_any(
                rpcs.FETCH_METADATA,
                request,
                read_only=True,
                deadline=budget.ends,
                retry_until=budget.retry_until,
                avoid=budget.avoid,
                attempts=budget.attempts,
                abort=budget.abort,
            )
        return self._metadata_of(response)

    def adopt_metadata(self, response: api_pb2.FetchMetadataResponse) -> Metadata:
        """Cache the snapshot of a full FetchMetadata answer (all streams) and return it."""
        snapshot = self._metadata_of(response)
        self.metadata.store(snapshot)
        return snapshot

    def _metadata_of(self, response: api_pb2.FetchMetadataResponse) -> Metadata:
        """The snapshot of a FetchMetadata answer, broker addresses translated."""
        snapshot = Metadata.from_proto(response, fetched_at=time.monotonic())
        translator = self.options.address_translator
        if translator is None:
            brokers = dialable_brokers(
                snapshot.brokers, lambda text: self._undialable.warning("%s", text)
            )
            if brokers is snapshot.brokers:
                return snapshot
            return dataclasses.replace(snapshot, brokers=brokers)
        return dataclasses.replace(
            snapshot, brokers=tuple(translate_broker(b, translator) for b in snapshot.brokers)
        )

    def fetch_metadata(self, streams: Sequence[str] = (), budget: Budget | None = None) -> Metadata:
        """Ask a broker for metadata (all streams, or only ``streams``) and cache it;
        within ``budget`` (see :meth:`_fetch_metadata`) if given."""
        if not streams:
            return self.metadata.refresh(budget)
        snapshot = self._fetch_metadata(streams, budget)
        self.metadata.merge(snapshot)
        return snapshot

    def refresh_once(
        self,
        streams: Sequence[str],
        deadline: float | None,
        *,
        drop_unknown: bool = False,
        abort: DialAbort | None = None,
    ) -> Metadata:
        """One pass over the brokers for fresh metadata of ``streams``, without retries;
        the answer (also merged into the cache).

        For callers that own their back-off and must keep within a deadline (the
        resubscribe loop): each broker gets at most the time left. With
        ``drop_unknown``, streams the answer lacks leave the cache (see
        :meth:`.MetadataCache.merge`). ``abort``, if given, ends the pass when it
        aborts (the caller closing from another thread).

        Raises:
            BrokerUnavailableError: no broker answered.
            ClientClosedError: the client is closed, or ``abort`` aborted.
        """
        request = api_pb2.FetchMetadataRequest(streams=list(streams))
        candidates = self.addresses()
        shift = next(self._rotation) % len(candidates)
        error: LiftbridgeError | None = None
        for address in candidates[shift:] + candidates[:shift]:
            timeout = self.options.rpc_timeout
            if deadline is not None:
                timeout = max(0.01, min(timeout, deadline - time.monotonic()))
            try:
                response = self.invoke(
                    address,
                    rpcs.FETCH_METADATA,
                    request,
                    context=CallContext.GENERIC,
                    timeout=timeout,
                    abort=abort,
                )
            except (BrokerUnavailableError, DeadlineExceededError) as exc:
                error = exc
                continue
            answer = self._metadata_of(response)
            self.metadata.merge(answer, gone=streams if drop_unknown else ())
            return answer
        raise BrokerUnavailableError(f"no broker answered FetchMetadata ({error})")

    def stream_info_partitions(
        self, stream: str, *, refresh: bool = False, budget: Budget | None = None
    ) -> int:
        """Number of partitions of ``stream`` (fetching metadata when unknown, within
        ``budget`` if given).

        Raises:
            NoSuchStreamError: if the server does not know the stream.
        """
        info = None if refresh else self.metadata.cached_stream(stream)
        if info is None:
            info = self.fetch_metadata([stream], budget).streams.get(stream)
        if info is None:
            raise NoSuchStreamError(f"no such stream: {stream!r}", code="NOT_FOUND")
        return len(info.partitions)

    def partition_count(self, stream: str) -> int:
        """Partition count for partitioners (see :class:`.PartitionCounts`).

        Raises:
            NoSuchStreamError: if the stream is still unknown after a short wait.
            ClientClosedError: the client was closed meanwhile.
        """
        return self._counts.count(stream)


def _result(future: Any, seconds: float, what: str, abort: DialAbort | None) -> Any:
    """The answer of a grpcio call ``future`` within ``seconds``, the call cancelled
    when they pass or ``abort`` (if given) aborts.

    Raises:
        DeadlineExceededError: no answer within ``seconds``.
        ClientClosedError: ``abort`` aborted.
        grpc.RpcError: the call failed.
    """
    if abort is None:
        try:
            return future.result(timeout=seconds)
        except grpc.FutureTimeoutError:
            future.cancel()
            raise DeadlineExceededError(
                f"{what}: no answer within {seconds:.3g}s", code="DEADLINE_EXCEEDED"
            ) from None
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    try:
        with abort.waiting(done):
            wait_event(done, seconds)
    except ClientClosedError:
        future.cancel()
        raise ClientClosedError(f"{what}: abandoned, its caller was closed") from None
    if not future.done():
        future.cancel()
        raise DeadlineExceededError(
            f"{what}: no answer within {seconds:.3g}s", code="DEADLINE_EXCEEDED"
        )
    return future.result()
