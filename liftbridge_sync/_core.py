"""Resilient RPCs: broker selection, leader routing, deadlines and retries.

Every unary call carries a deadline (``ClientOptions.rpc_timeout`` per attempt). Calls that
any broker can serve rotate over the known brokers (metadata, then seeds) and retry
``UNAVAILABLE`` under the retry policy. Calls that must reach a partition leader look the
leader up in the metadata cache, and on not-leader or an unreachable leader refresh the
metadata and try again.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from liftbridge_sync._metadata import MetadataCache
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._retry import call_with_retry
from liftbridge_sync._transport import ChannelPool
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    CallContext,
    DeadlineExceededError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    error_from_rpc_error,
)
from liftbridge_sync.models import Metadata, PartitionInfo
from liftbridge_sync.options import ClientOptions, RetryPolicy

__all__ = ["ClientCore"]

_log = logging.getLogger("liftbridge_sync.client")

#: RPCs whose deadline is enforced by the client only (see ``_invoke_with_local_deadline``).
_LOCAL_DEADLINE_METHODS = frozenset({"FetchMetadata"})


class ClientCore:
    """Channels, metadata and RPC routing shared by the client's parts.

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
        self.metadata = MetadataCache(self._fetch_metadata)
        self._rotation = itertools.count()

    # ------------------------------------------------------------------ brokers

    def addresses(self) -> list[str]:
        """Brokers to try: those in the cached metadata, then the seeds not among them."""
        result: list[str] = []
        snapshot = self.metadata.snapshot
        if snapshot is not None:
            result.extend(broker.address for broker in snapshot.brokers)
        result.extend(a for a in self.options.addresses if a not in result)
        return result

    def invoke(
        self,
        address: str,
        method: str,
        request: Any,
        *,
        context: CallContext,
        timeout: float | None = None,
    ) -> Any:
        """One attempt of a unary RPC on one broker; gRPC errors become LiftbridgeErrors."""
        stub = self.pool.stub(address)
        deadline = timeout or self.options.rpc_timeout
        try:
            if method in _LOCAL_DEADLINE_METHODS:
                return self._invoke_with_local_deadline(getattr(stub, method), request, deadline)
            return getattr(stub, method)(request, timeout=deadline)
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc, context) from None

    @staticmethod
    def _invoke_with_local_deadline(rpc: Any, request: Any, deadline: float) -> Any:
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
                f"no answer within {deadline}s", code="DEADLINE_EXCEEDED"
            ) from None

    def call_any(
        self,
        method: str,
        request: Any,
        *,
        context: CallContext = CallContext.GENERIC,
        timeout: float | None = None,
    ) -> Any:
        """Call an RPC that any broker can serve, rotating brokers on retryable errors."""
        start = next(self._rotation)

        def attempt(number: int) -> Any:
            candidates = self.addresses()
            address = candidates[(start + number - 1) % len(candidates)]
            return self.invoke(address, method, request, context=context, timeout=timeout)

        return call_with_retry(self.options.retry, method, attempt)

    # ------------------------------------------------------------------ metadata

    def _fetch_metadata(self, streams: Sequence[str]) -> Metadata:
        request = api_pb2.FetchMetadataRequest(streams=list(streams))
        response = self.call_any("FetchMetadata", request)
        return Metadata.from_proto(response, fetched_at=time.monotonic())

    def fetch_metadata(self, streams: Sequence[str] = ()) -> Metadata:
        """Ask a broker for metadata (all streams, or only ``streams``) and cache it."""
        if not streams:
            return self.metadata.refresh()
        snapshot = self._fetch_metadata(streams)
        self.metadata.merge(snapshot)
        return snapshot

    def refresh_once(self, streams: Sequence[str], deadline: float | None) -> None:
        """One pass over the brokers for fresh metadata of ``streams``, without retries.

        For callers that own their back-off and must keep within a deadline (the
        resubscribe loop): each broker gets at most the time left.

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
                    address, "FetchMetadata", request, context=CallContext.GENERIC, timeout=timeout
                )
            except (BrokerUnavailableError, DeadlineExceededError) as exc:
                error = exc
                continue
            self.metadata.merge(Metadata.from_proto(response, fetched_at=time.monotonic()))
            return
        raise BrokerUnavailableError(f"no broker answered FetchMetadata ({error})")

    def stream_info_partitions(self, stream: str, *, refresh: bool = False) -> int:
        """Number of partitions of ``stream`` (fetching metadata when unknown).

        Raises:
            NoSuchStreamError: if the server does not know the stream.
        """
        snapshot = self.metadata.snapshot
        info = None if refresh or snapshot is None else snapshot.streams.get(stream)
        if info is None:
            info = self.fetch_metadata([stream]).streams.get(stream)
        if info is None:
            raise NoSuchStreamError(f"no such stream: {stream!r}", code="NOT_FOUND")
        return len(info.partitions)

    def partition_count(self, stream: str) -> int:
        """Partition count for partitioners; waits briefly for a just-created stream.

        Raises:
            NoSuchStreamError: if the stream is still unknown after a short wait.
        """
        # The first attempt may answer from the cache; later ones ask again, because
        # metadata comes from each server's replicated view, which may trail a
        # CreateStream that just returned by a few milliseconds.
        settle = RetryPolicy(max_attempts=6, max_delay=1.0, initial=0.05, maximum=0.2, jitter=0.0)
        return call_with_retry(
            settle,
            "partition count",
            lambda attempt: self.stream_info_partitions(stream, refresh=attempt > 1),
            retry_if=lambda exc: isinstance(exc, NoSuchStreamError),
        )

    def partition_info(self, stream: str, partition: int, *, refresh: bool) -> PartitionInfo:
        """The partition's metadata, refreshing once if the cache lacks it.

        Raises:
            NoSuchPartitionError: if the server does not know the stream or partition.
        """
        snapshot = self.metadata.refresh() if refresh else self.metadata.get()
        info = snapshot.partition(stream, partition)
        if info is None and not refresh:
            info = self.metadata.refresh().partition(stream, partition)
        if info is None:
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

    def call_leader(
        self,
        stream: str,
        partition: int,
        method: str,
        request: Any,
        *,
        context: CallContext = CallContext.LEADER,
        settle: Callable[[PartitionInfo], Any] | None = None,
    ) -> Any:
        """Call an RPC that the partition leader must serve; refresh and retry on not-leader.

        Args:
            settle: After a not-leader answer, the refreshed partition metadata is passed
                here; a non-``None`` result is returned instead of retrying (for a paused
                partition there is no running leader to find).
        """
        refresh = False

        def attempt(number: int) -> Any:
            nonlocal refresh
            try:
                info = self.partition_info(stream, partition, refresh=refresh)
                if refresh and settle is not None:
                    settled = settle(info)
                    if settled is not None:
                        return settled
                address = self.leader_address_of(info)
                return self.invoke(address, method, request, context=context)
            except (NotLeaderError, BrokerUnavailableError):
                refresh = True
                raise

        return call_with_retry(self.options.retry, method, attempt)

    def close(self) -> None:
        """Close all channels."""
        self.pool.close()
