"""Calls a partition leader must serve: the leader looked up in the metadata cache, and
on not-leader, an unreachable leader or one that did not answer in time (hung: another
may have taken over) the metadata refreshed and the call tried again, all within the
time the retry policy gives the call (its :class:`~.retry.Budget`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TypeVar, overload

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import Budget, call_with_retry, retryable_elsewhere
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.rpcs import Req, Resp, Rpc
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync._wire.validate import check_name, check_partition
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    DeadlineExceededError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
)
from liftbridge_sync.models import PartitionInfo, PartitionMetadata

__all__ = [
    "call_leader",
    "fetch_partition_metadata",
    "fetch_partition_metadata_once",
    "leader_address_of",
    "partition_info",
    "time_left",
]

T = TypeVar("T")

_PARTITION_FIELDS = tuple(f.name for f in dataclasses.fields(PartitionMetadata))


def partition_info(
    core: ClientCore, stream: str, partition: int, *, refresh: bool, budget: Budget | None = None
) -> PartitionInfo:
    """The partition's metadata, refreshing once if the cache lacks it.

    A refresh keeps to ``budget`` if given (see :meth:`.MetadataCache.refresh`).
    Thread-safe.

    Raises:
        NoSuchStreamError: if the server does not know the stream.
        NoSuchPartitionError: if the stream has no such partition.
    """
    metadata = core.metadata
    snapshot = metadata.refresh(budget) if refresh else metadata.get(budget)
    info = snapshot.partition(stream, partition)
    if info is None and not refresh:
        info = metadata.refresh(budget).partition(stream, partition)
    if info is None:
        if stream not in metadata.get().streams:
            raise NoSuchStreamError(f"no such stream: {stream!r}", code="NOT_FOUND")
        raise NoSuchPartitionError(
            f"no such partition: stream {stream!r} partition {partition}", code="NOT_FOUND"
        )
    return info


def leader_address_of(core: ClientCore, info: PartitionInfo) -> str:
    """``host:port`` of the leader named in ``info`` (per the cached broker list).

    Thread-safe.

    Raises:
        NotLeaderError: ``info`` names no leader the cached broker list knows.
    """
    broker = core.metadata.get().broker(info.leader) if info.leader else None
    if broker is None:
        raise NotLeaderError(
            f"partition {info.stream!r}/{info.id} has no known leader yet (leader={info.leader!r})"
        )
    return broker.address


@overload
def call_leader(
    core: ClientCore,
    stream: str,
    partition: int,
    rpc: Rpc[Req, Resp],
    request: Req,
    *,
    context: CallContext = ...,
    settle: None = None,
    abort: DialAbort | None = None,
) -> Resp: ...


@overload
def call_leader(
    core: ClientCore,
    stream: str,
    partition: int,
    rpc: Rpc[Req, Resp],
    request: Req,
    *,
    context: CallContext = ...,
    settle: Callable[[PartitionInfo], T | None],
    abort: DialAbort | None = None,
) -> Resp | T: ...


def call_leader(
    core: ClientCore,
    stream: str,
    partition: int,
    rpc: Rpc[Req, Resp],
    request: Req,
    *,
    context: CallContext = CallContext.LEADER,
    settle: Callable[[PartitionInfo], T | None] | None = None,
    abort: DialAbort | None = None,
) -> Resp | T:
    """Call an RPC that the partition leader must serve; refresh and retry on
    not-leader, an unreachable leader or a deadline (the RPC must be idempotent).

    The retry policy bounds the whole call, its metadata refreshes included: no
    attempt starts after ``max_delay`` and each ends within ``rpc_timeout`` of it, and
    no more than ``max_attempts`` fail, those of the refreshes counted with the
    leader's. Thread-safe.

    Args:
        settle: After a not-leader answer, the refreshed partition metadata is passed
            here; a non-``None`` result is returned instead of retrying (for a paused
            partition there is no running leader to find).
        abort: Ends the call's back-offs and metadata look-ups at once when aborted
            (its owner closed), with ``ClientClosedError``; an RPC under way still
            ends within ``rpc_timeout``.
    """
    options = core.options
    refresh = False
    # One budget for the call: a refresh retried under a policy of its own took up
    # to max_delay again on each attempt (twice max_delay against a dead cluster).
    budget = dataclasses.replace(Budget.of(options.retry, options.rpc_timeout), abort=abort)
    # Leaders that ran out of time or could not be reached: a refresh asks the other
    # brokers first (a hung leader, asked again, took the rest of the budget).
    suspects: set[str] = set()
    attempts = budget.attempts
    assert attempts is not None  # Budget.of counts them

    def attempt(number: int) -> Resp | T:
        nonlocal refresh
        address = None
        counted = attempts.failed
        try:
            within = dataclasses.replace(budget, avoid=frozenset(suspects))
            info = partition_info(core, stream, partition, refresh=refresh, budget=within)
            # The look-up's failed FetchMetadata attempts counted themselves: a failure
            # from here on is this attempt's own.
            counted = attempts.failed
            if refresh and settle is not None:
                settled = settle(info)
                if settled is not None:
                    return settled
            address = leader_address_of(core, info)
            left = time_left(core, budget, rpc.name)
            return core.invoke(address, rpc, request, context=context, timeout=left)
        except Exception as exc:
            if attempts.failed == counted:  # else the look-up's attempts counted it
                attempts.fail()
            if isinstance(exc, (NotLeaderError, BrokerUnavailableError, DeadlineExceededError)):
                refresh = True
                if address is not None and not isinstance(exc, NotLeaderError):
                    suspects.add(address)
            raise

    return call_with_retry(
        options.retry,
        rpc.name,
        attempt,
        retry_if=retryable_elsewhere,
        deadline=budget.retry_until,
        sleep=lambda seconds: core.back_off(seconds, abort),
        attempts=attempts,
    )


def time_left(core: ClientCore, budget: Budget, what: str) -> float:
    """Seconds the next RPC within ``budget`` may take (``rpc_timeout`` at most).

    Thread-safe.

    Raises:
        DeadlineExceededError: none left (the metadata look-up took it).
    """
    left = min(core.options.rpc_timeout, budget.ends - time.monotonic())
    if left <= 0:
        raise DeadlineExceededError(
            f"{what}: looking the leader up took the call's time", code="DEADLINE_EXCEEDED"
        )
    return left


def fetch_partition_metadata(
    core: ClientCore, stream: str, partition: int, *, abort: DialAbort | None = None
) -> PartitionMetadata:
    """Authoritative partition state from its leader (see ``Client``); ``abort`` as
    :func:`call_leader`'s. Thread-safe."""
    check_name("stream", stream, allow_reserved=True)
    check_partition("partition", partition)
    request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)

    def paused_view(info: PartitionInfo) -> PartitionMetadata | None:
        # A paused partition has no running leader to ask; the cluster metadata is
        # then the best available view (and says it is paused).
        if not info.paused:
            return None
        return PartitionMetadata(**{f: getattr(info, f) for f in _PARTITION_FIELDS})

    response = call_leader(
        core,
        stream,
        partition,
        rpcs.FETCH_PARTITION_METADATA,
        request,
        settle=paused_view,
        abort=abort,
    )
    if isinstance(response, PartitionMetadata):
        return response
    return PartitionMetadata.from_proto(stream, response.metadata)


def fetch_partition_metadata_once(
    core: ClientCore,
    stream: str,
    partition: int,
    timeout: float,
    *,
    abort: DialAbort | None = None,
) -> PartitionMetadata:
    """One attempt of :func:`fetch_partition_metadata`, at the cached leader, within
    ``timeout`` seconds: for callers that keep a deadline of their own (no retries,
    no metadata refresh, no answer for a paused partition). A partition the cache
    lacks is looked up within ``timeout`` too (one FetchMetadata attempt). ``abort``,
    if given, ends it when it aborts (the caller closing from another thread).
    Thread-safe.

    Raises:
        NotLeaderError: the cached leader is not (or no longer) the leader.
        ClientClosedError: ``abort`` aborted.
        LiftbridgeError: any other failure of the one attempt.
    """
    budget = dataclasses.replace(Budget.once(timeout), abort=abort)
    info = partition_info(core, stream, partition, refresh=False, budget=budget)
    request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)
    response = core.invoke(
        leader_address_of(core, info),
        rpcs.FETCH_PARTITION_METADATA,
        request,
        context=CallContext.LEADER,
        timeout=time_left(core, budget, rpcs.FETCH_PARTITION_METADATA.name),
        abort=abort,
    )
    return PartitionMetadata.from_proto(stream, response.metadata)
