"""Resilient RPCs: broker selection, leader routing, deadlines and retries.

Every unary call carries a deadline (``ClientOptions.rpc_timeout`` per attempt). Calls that
any broker can serve rotate over the known brokers (metadata, then seeds) and retry
``UNAVAILABLE`` under the retry policy; ``FetchMetadata``, which only reads, also goes on
to the next broker after an attempt that ran out of its deadline (a broker that takes
connections but does not answer). Calls that must reach a partition leader (each
idempotent) look the leader up in the metadata cache, and on not-leader, an unreachable
leader or one that did not answer in time (hung: another may have taken over) refresh
the metadata and try again.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync._runtime.scheduler import Scheduler
from liftbridge_sync._transport.channels import ChannelPool
from liftbridge_sync._transport.h2.sockets import speaks_tls
from liftbridge_sync._transport.metadata import MetadataCache, translate_broker
from liftbridge_sync._transport.partition_counts import PartitionCounts
from liftbridge_sync._transport.retry import Budget, call_with_retry, is_retryable
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.cursors import cursor_partition, visibility_cursor
from liftbridge_sync._wire.rpcs import Req, Resp, Rpc
from liftbridge_sync._wire.status import (
    CallContext,
    closed_at_connect,
    error_from_rpc_error,
    plaintext_refused_error,
)
from liftbridge_sync._wire.validate import check_id, check_int, check_name, check_partition
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    DeadlineExceededError,
    ForkedClientError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PermissionDeniedError,
    ServerError,
)
from liftbridge_sync.models import Metadata, PartitionInfo, PartitionMetadata
from liftbridge_sync.options import ClientOptions, parse_address

__all__ = ["ClientCore"]

T = TypeVar("T")

_log = logging.getLogger("liftbridge_sync.client")

#: Seconds a broker must be missing from the metadata before its channels are closed:
#: one that left for good stays missing, one restarting is back within seconds.
DEPARTED_AFTER = 30.0

#: RPCs whose deadline is enforced by the client only (see ``_invoke_with_local_deadline``).
_LOCAL_DEADLINE_METHODS = frozenset({"FetchMetadata"})
CURSORS_STREAM = "__cursors"
_PARTITION_FIELDS = tuple(f.name for f in dataclasses.fields(PartitionMetadata))


def _retryable_elsewhere(error: BaseException) -> bool:
    """Whether an idempotent call may be tried again, at another broker or at a refreshed
    leader, after ``error``: a retryable one, or a deadline (the broker it went to may be
    hung while the others answer)."""
    return is_retryable(error) or isinstance(error, DeadlineExceededError)


#: A TLS verdict not asked for yet.
_UNASKED = object()
#: The longest a broker's port is asked whether it speaks TLS (connect, then handshake).
_TLS_QUESTION_WAIT = 2.0


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
        self.metadata = MetadataCache(self._fetch_metadata, on_brokers=self._forget_departed)
        # Lambdas, not bound methods: what they call is looked up on each call.
        self._counts = PartitionCounts(
            self.metadata,
            options.metadata_max_age,
            lambda streams, deadline: self.refresh_once(streams, deadline),
            lambda stream, budget: self.stream_info_partitions(stream, refresh=True, budget=budget),
            options.retry,
            options.rpc_timeout,
        )
        self._rotation = itertools.count()
        self._lock = threading.Lock()
        self._closeables: weakref.WeakSet[Any] = weakref.WeakSet()
        #: What each broker's port answered a TLS probe with (see ``_tls_required``).
        self._tls_verdicts: dict[str, str | None | object] = {}
        self._scheduler: Scheduler | None = None
        self._cursors_unrevealed_told = False
        #: Seconds a broker must be missing from every metadata answer before the
        #: channels to it are closed (see _forget_departed); tests shorten it.
        self.departed_after = DEPARTED_AFTER
        #: Since when each address with a channel has been missing from the metadata.
        self._absent_since: dict[str, float] = {}
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
        """Close what was registered (publishes get ``timeout``), then the channels."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            closeables = list(self._closeables)
        for closeable in closeables:
            if getattr(closeable, "close_accepts_timeout", False):
                closeable.close(timeout=timeout)
            else:
                closeable.close()
        self.pool.close()

    def back_off(self, seconds: float) -> None:
        """Sleep a retry's back-off of ``seconds``, cut short by :meth:`close`.

        A back-off lasts up to ``RetryPolicy.maximum``: in a plain sleep, a thread in a
        retried call outlived ``close()`` by that long.

        Raises:
            ClientClosedError: the client is closed, or was closed during the sleep.
        """
        woken = threading.Event()
        try:
            with self.pool.closing.waiting(woken):
                wait_event(woken, seconds)
        except ClientClosedError:
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
        """Retire the channels to addresses that have been neither a broker of the
        metadata nor a seed for :attr:`departed_after` seconds: under rolling
        replacements (new addresses each time) they would otherwise pile up, with their
        connections, until :meth:`close`. The TLS verdicts (see :meth:`_tls_required`)
        of the departed brokers, and of addresses neither listed nor holding a channel,
        are forgotten with them.

        An answer that lists no broker retires nothing. Called after every metadata
        update that replaced the broker list; it reads the latest snapshot, so a late
        call with an older list cannot undo a newer one's view for long.
        """
        snapshot = self.metadata.snapshot
        if self.closed or snapshot is None or not snapshot.brokers:
            return
        listed = {broker.address for broker in snapshot.brokers}
        listed.update(self.options.addresses)
        now = time.monotonic()
        with self._lock:
            # A v1.9.0 broker lists only the peers that answered its survey in time: a
            # broker restarting, or slow for a moment, is left out of an answer or two.
            # Only one missing from every answer for departed_after is gone for good.
            held = set(self.pool.addresses())
            absent = held - listed
            since = self._absent_since
            for address in [a for a in since if a not in absent]:
                del since[address]
            for address in absent:
                since.setdefault(address, now)
            departed = {a for a in absent if now - since[a] >= self.departed_after}
            for address in departed:
                del since[address]
            # A verdict is kept only while its broker may still be called: one per
            # address ever seen would grow for good under rolling replacements (and a
            # broker coming back at a departed address is asked again).
            verdicts = self._tls_verdicts
            for address in [a for a in verdicts if a in departed or a not in held | listed]:
                del verdicts[address]
        if not departed:
            return
        gone = self.pool.retire(held - departed | listed)
        if gone:
            _log.debug("closing the channels to brokers no longer in the cluster: %s", gone)

    def invoke(
        self,
        address: str,
        rpc: Rpc[Req, Resp],
        request: Req,
        *,
        context: CallContext,
        timeout: float | None = None,
    ) -> Resp:
        """One attempt of a unary RPC on one broker; gRPC errors become LiftbridgeErrors.

        ``timeout`` (default ``rpc_timeout``) bounds the whole attempt: a first TLS
        pre-flight to the broker and telling a refused plaintext connection apart
        (:meth:`error_of`) included.
        """
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
            return self._invoke_on(stub, address, rpc, request, context, deadline, ends)
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
    ) -> Resp:
        method = getattr(stub, rpc.name)
        try:
            if rpc.name in _LOCAL_DEADLINE_METHODS:
                response: Resp = self._invoke_with_local_deadline(
                    method, request, deadline, f"{rpc.name} to {address}"
                )
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
        port for TLS (:meth:`_tls_required`, within ``budget`` seconds if given): only a
        verified answer makes it a final :class:`TLSError`.
        """
        error = error_from_rpc_error(exc, context)
        if (
            self.options.tls is None
            and isinstance(error, BrokerUnavailableError)
            and closed_at_connect(error.details or "")
        ):
            return self._tls_required(address, error, budget)
        return error

    def _tls_required(
        self, address: str, error: BrokerUnavailableError, budget: float | None = None
    ) -> BrokerUnavailableError:
        """``error`` told apart: a verified TLS answer from the broker's port makes it a
        final TLSError, an unverified one a retryable hint, none leaves it as it is.

        The port is asked once per address and client (the answer is kept while the
        broker is listed, a seed, or has a channel: see :meth:`_forget_departed`)."""
        verdict = self._tls_verdicts.get(address, _UNASKED)
        if verdict is _UNASKED:
            wait = _TLS_QUESTION_WAIT if budget is None else min(_TLS_QUESTION_WAIT, budget)
            if wait <= 0:
                return error  # the caller's time is up: asked next time
            host, port = parse_address(address)
            verdict = speaks_tls((host, port), wait, self.pool.closing)
            if verdict is not None or wait == _TLS_QUESTION_WAIT:
                with self._lock:  # _forget_departed goes through the verdicts under it
                    self._tls_verdicts[address] = verdict  # else perhaps only cut short
        if verdict is None:
            return error
        return plaintext_refused_error(
            str(error).split(":", 1)[0], error.details or "", verified=verdict == "verified"
        )

    @staticmethod
    def _invoke_with_local_deadline(rpc: Any, request: Any, deadline: float, what: str) -> Any:
        # The server surveys its peers for FetchMetadata until the call's deadline, or
        # for 3 s when the call has none. With a peer down, any deadline we send would be
        # used up by the survey and the answer would arrive just too late; so the wait is
        # bounded here instead and the server keeps its own shorter survey limit.
        future = rpc.future(request)
        try:
            return future.result(timeout=deadline)
        except grpc.FutureTimeoutError:
            future.cancel()
            raise DeadlineExceededError(
                f"{what}: no answer within {deadline:.3g}s", code="DEADLINE_EXCEEDED"
            ) from None

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
        other is known."""
        start = next(self._rotation)

        def attempt(number: int) -> Resp:
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
                return self.invoke(address, rpc, request, context=context, timeout=seconds)
            except LiftbridgeError as exc:
                if failed is not None:
                    failed.append(exc)
                raise

        retry_if = _retryable_elsewhere if read_only else is_retryable
        ends = [t for t in (deadline, retry_until) if t is not None]
        return call_with_retry(
            self.options.retry,
            rpc.name,
            attempt,
            retry_if=retry_if,
            deadline=min(ends, default=None),
            sleep=self.back_off,
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
            return snapshot
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
        self, streams: Sequence[str], deadline: float | None, *, drop_unknown: bool = False
    ) -> None:
        """One pass over the brokers for fresh metadata of ``streams``, without retries.

        For callers that own their back-off and must keep within a deadline (the
        resubscribe loop): each broker gets at most the time left. With
        ``drop_unknown``, streams the answer lacks leave the cache (see
        :meth:`.MetadataCache.merge`).

        Raises:
            BrokerUnavailableError: no broker answered.
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
                )
            except (BrokerUnavailableError, DeadlineExceededError) as exc:
                error = exc
                continue
            self.metadata.merge(self._metadata_of(response), gone=streams if drop_unknown else ())
            return
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
        """
        return self._counts.count(stream)

    def partition_info(
        self, stream: str, partition: int, *, refresh: bool, budget: Budget | None = None
    ) -> PartitionInfo:
        """The partition's metadata, refreshing once if the cache lacks it.

        A refresh keeps to ``budget`` if given (see :meth:`.MetadataCache.refresh`).

        Raises:
            NoSuchStreamError: if the server does not know the stream.
            NoSuchPartitionError: if the stream has no such partition.
        """
        snapshot = self.metadata.refresh(budget) if refresh else self.metadata.get(budget)
        info = snapshot.partition(stream, partition)
        if info is None and not refresh:
            info = self.metadata.refresh(budget).partition(stream, partition)
        if info is None:
            if stream not in self.metadata.get().streams:
                raise NoSuchStreamError(f"no such stream: {stream!r}", code="NOT_FOUND")
            raise NoSuchPartitionError(
                f"no such partition: stream {stream!r} partition {partition}", code="NOT_FOUND"
            )
        return info

    def leader_address_of(self, info: PartitionInfo) -> str:
        """``host:port`` of the leader named in ``info`` (per the cached broker list)."""
        broker = self.metadata.get().broker(info.leader) if info.leader else None
        if broker is None:
            raise NotLeaderError(
                f"partition {info.stream!r}/{info.id} has no known leader yet "
                f"(leader={info.leader!r})"
            )
        return broker.address

    @overload
    def call_leader(
        self,
        stream: str,
        partition: int,
        rpc: Rpc[Req, Resp],
        request: Req,
        *,
        context: CallContext = ...,
        settle: None = None,
    ) -> Resp: ...

    @overload
    def call_leader(
        self,
        stream: str,
        partition: int,
        rpc: Rpc[Req, Resp],
        request: Req,
        *,
        context: CallContext = ...,
        settle: Callable[[PartitionInfo], T | None],
    ) -> Resp | T: ...

    def call_leader(
        self,
        stream: str,
        partition: int,
        rpc: Rpc[Req, Resp],
        request: Req,
        *,
        context: CallContext = CallContext.LEADER,
        settle: Callable[[PartitionInfo], T | None] | None = None,
    ) -> Resp | T:
        """Call an RPC that the partition leader must serve; refresh and retry on
        not-leader, an unreachable leader or a deadline (the RPC must be idempotent).

        The retry policy bounds the whole call, its metadata refreshes included: no
        attempt starts after ``max_delay`` and each ends within ``rpc_timeout`` of it.

        Args:
            settle: After a not-leader answer, the refreshed partition metadata is passed
                here; a non-``None`` result is returned instead of retrying (for a paused
                partition there is no running leader to find).
        """
        refresh = False
        # One budget for the call: a refresh retried under a policy of its own took up
        # to max_delay again on each attempt (twice max_delay against a dead cluster).
        budget = Budget.of(self.options.retry, self.options.rpc_timeout)
        # Leaders that ran out of time or could not be reached: a refresh asks the other
        # brokers first (a hung leader, asked again, took the rest of the budget).
        suspects: set[str] = set()

        def attempt(number: int) -> Resp | T:
            nonlocal refresh
            address = None
            try:
                within = dataclasses.replace(budget, avoid=frozenset(suspects))
                info = self.partition_info(stream, partition, refresh=refresh, budget=within)
                if refresh and settle is not None:
                    settled = settle(info)
                    if settled is not None:
                        return settled
                address = self.leader_address_of(info)
                left = self._time_left(budget, rpc.name)
                return self.invoke(address, rpc, request, context=context, timeout=left)
            except (NotLeaderError, BrokerUnavailableError, DeadlineExceededError) as exc:
                refresh = True
                if address is not None and not isinstance(exc, NotLeaderError):
                    suspects.add(address)
                raise

        return call_with_retry(
            self.options.retry,
            rpc.name,
            attempt,
            retry_if=_retryable_elsewhere,
            deadline=budget.retry_until,
            sleep=self.back_off,
        )

    def _time_left(self, budget: Budget, what: str) -> float:
        """Seconds the next RPC within ``budget`` may take (``rpc_timeout`` at most).

        Raises:
            DeadlineExceededError: none left (the metadata look-up took it).
        """
        left = min(self.options.rpc_timeout, budget.ends - time.monotonic())
        if left <= 0:
            raise DeadlineExceededError(
                f"{what}: looking the leader up took the call's time", code="DEADLINE_EXCEEDED"
            )
        return left

    # ------------------------------------------------------------------ leader RPCs

    def fetch_partition_metadata(self, stream: str, partition: int) -> PartitionMetadata:
        """Authoritative partition state from its leader (see ``Client``)."""
        check_name("stream", stream, allow_reserved=True)
        check_partition("partition", partition)
        request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)

        def paused_view(info: PartitionInfo) -> PartitionMetadata | None:
            # A paused partition has no running leader to ask; the cluster metadata is
            # then the best available view (and says it is paused).
            if not info.paused:
                return None
            return PartitionMetadata(**{f: getattr(info, f) for f in _PARTITION_FIELDS})

        response = self.call_leader(
            stream, partition, rpcs.FETCH_PARTITION_METADATA, request, settle=paused_view
        )
        if isinstance(response, PartitionMetadata):
            return response
        return PartitionMetadata.from_proto(stream, response.metadata)

    def fetch_partition_metadata_once(
        self, stream: str, partition: int, timeout: float
    ) -> PartitionMetadata:
        """One attempt of :meth:`fetch_partition_metadata`, at the cached leader, within
        ``timeout`` seconds: for callers that keep a deadline of their own (no retries,
        no metadata refresh, no answer for a paused partition). A partition the cache
        lacks is looked up within ``timeout`` too (one FetchMetadata attempt).

        Raises:
            NotLeaderError: the cached leader is not (or no longer) the leader.
            LiftbridgeError: any other failure of the one attempt.
        """
        budget = Budget.once(timeout)
        info = self.partition_info(stream, partition, refresh=False, budget=budget)
        request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)
        response = self.invoke(
            self.leader_address_of(info),
            rpcs.FETCH_PARTITION_METADATA,
            request,
            context=CallContext.LEADER,
            timeout=self._time_left(budget, rpcs.FETCH_PARTITION_METADATA.name),
        )
        return PartitionMetadata.from_proto(stream, response.metadata)

    def _cursor_target(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        must_exist: bool,
        budget: Budget | None = None,
    ) -> tuple[int, int]:
        check_id("cursor_id", cursor_id)
        check_name("stream", stream, allow_reserved=True)
        check_partition("partition", partition)
        if must_exist:
            # v1.9.0 stores a cursor for any name: a typo would go unnoticed. A stream
            # created a moment ago is found by the one refresh partition_info makes.
            self.partition_info(stream, partition, refresh=False, budget=budget)
        info = self.metadata.get(budget).streams.get(CURSORS_STREAM)
        if info is None:
            info = self.fetch_metadata([CURSORS_STREAM], budget).streams.get(CURSORS_STREAM)
        if info is None or not info.partitions:
            raise ServerError(
                "the server has no __cursors stream: cursors are disabled "
                "(set cursors.stream.partitions > 0 in the server configuration)"
            )
        count = len(info.partitions)
        return cursor_partition(cursor_id, stream, partition, count), count

    def set_cursor(
        self, cursor_id: str, stream: str, partition: int, offset: int, *, must_exist: bool = False
    ) -> None:
        """Store ``offset`` under ``cursor_id`` (routed to the cursor partition's leader).

        With ``must_exist``, a stream or partition the cluster's metadata lacks (after one
        refresh) raises ``NoSuchStreamError``/``NoSuchPartitionError`` instead.
        """
        check_int("offset", offset, minimum=-1)
        target, _ = self._cursor_target(cursor_id, stream, partition, must_exist)
        request = api_pb2.SetCursorRequest(
            stream=stream, partition=partition, cursorId=cursor_id, offset=offset
        )
        self.call_leader(CURSORS_STREAM, target, rpcs.SET_CURSOR, request)

    def set_cursor_once(
        self, cursor_id: str, stream: str, partition: int, offset: int, timeout: float
    ) -> None:
        """One attempt of :meth:`set_cursor`, at the cached leader of the cursor's
        ``__cursors`` partition, within ``timeout`` seconds: for callers that keep a
        deadline of their own (no retries, no metadata refresh). What the cache lacks
        is looked up within ``timeout`` too (one FetchMetadata attempt each).

        Raises:
            NotLeaderError: the cached leader is not (or no longer) the leader.
            LiftbridgeError: any other failure of the one attempt.
        """
        check_int("offset", offset, minimum=-1)
        budget = Budget.once(timeout)
        target, _ = self._cursor_target(cursor_id, stream, partition, False, budget)
        info = self.partition_info(CURSORS_STREAM, target, refresh=False, budget=budget)
        request = api_pb2.SetCursorRequest(
            stream=stream, partition=partition, cursorId=cursor_id, offset=offset
        )
        self.invoke(
            self.leader_address_of(info),
            rpcs.SET_CURSOR,
            request,
            context=CallContext.LEADER,
            timeout=self._time_left(budget, rpcs.SET_CURSOR.name),
        )

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, must_exist: bool = False
    ) -> int:
        """The offset stored under ``cursor_id``, or ``-1`` (``must_exist`` as for
        :meth:`set_cursor`)."""
        target, count = self._cursor_target(cursor_id, stream, partition, must_exist)
        self._reveal_cursors(target, count)
        request = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)
        response = self.call_leader(CURSORS_STREAM, target, rpcs.FETCH_CURSOR, request)
        return int(response.offset)

    def _reveal_cursors(self, target: int, count: int) -> None:
        """Make every cursor stored in ``__cursors`` partition ``target`` readable.

        v1.9.0 answers FetchCursor from the log up to the high watermark, which a
        restarted leader recovers from a checkpoint written every 5 s and not at
        shutdown: cursors set in the seconds before a restart read back older, or as
        ``-1``, until the partition commits something new (and the stale answer is then
        cached). A partition whose newest offset is past its watermark is given that
        new commit first: a cursor of our own, stored with ack ALL. So is a paused one,
        whose watermark no leader reports (the commit resumes it, as FetchCursor would).

        An ACL that lets this identity fetch cursors need not let it ask about or write
        to ``__cursors`` itself: then the cursor is read as the server has it, and the
        first time a WARNING says why it may be older.
        """
        try:
            info = self.fetch_partition_metadata(CURSORS_STREAM, target)
            if not info.paused and info.newest_offset <= info.high_watermark:
                return
            request = api_pb2.SetCursorRequest(
                stream=CURSORS_STREAM,
                partition=target,
                cursorId=visibility_cursor(target, count),
                offset=info.newest_offset,
            )
            self.call_leader(CURSORS_STREAM, target, rpcs.SET_CURSOR, request)
        except PermissionDeniedError as error:
            if not self._cursors_unrevealed_told:
                self._cursors_unrevealed_told = True
                _log.warning(
                    "cursors are read without first committing the rest of their "
                    "__cursors partition (%s): a cursor stored in the seconds before a "
                    "server restart may read back older, or as -1, until that partition "
                    "commits something new",
                    error,
                )
