"""Partition counts for partitioners: from the metadata cache, fetched again with age.

A partitioner (``ByKey()``, ``RoundRobin()``, the Spark and CLI ones) needs a stream's
partition count for every message it places. The cache answers almost every call. A
stream the cache does not know yet (created a moment ago) is asked for a few times,
since each server's view may trail a CreateStream that just returned. A count older than
``ClientOptions.metadata_max_age`` is fetched again by one caller, briefly, while the
others go on with the cached one: a stream deleted and created again keeps its name but
may have another count.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from liftbridge_sync._transport.metadata import MetadataCache
from liftbridge_sync._transport.retry import Budget, call_with_retry
from liftbridge_sync.errors import LiftbridgeError, NoSuchStreamError
from liftbridge_sync.options import RetryPolicy

__all__ = ["PartitionCounts"]

_log = logging.getLogger("liftbridge_sync.client")

#: Seconds a publish may wait for its stream's partition count to be fetched again
#: (see ``metadata_max_age``); past that, the cached count places it.
RECOUNT_WITHIN = 1.0

#: How long a stream the cache does not know is asked for: a few quick attempts.
_SETTLE = RetryPolicy(max_attempts=6, max_delay=1.0, initial=0.05, maximum=0.2, jitter=0.0)


class PartitionCounts:
    """Partition counts from ``cache``, fetched again once ``max_age`` old.

    Args:
        cache: The client's metadata cache.
        max_age: ``ClientOptions.metadata_max_age`` (``None``: never fetched again).
        refresh_once: One pass over the brokers for some streams' metadata, within a
            deadline, merged into ``cache`` (``ClientCore.refresh_once``).
        fetch_count: A stream's partition count asked of the servers within a budget
            (``NoSuchStreamError`` if unknown).
        retry: The client's retry policy: a count of a stream the cache does not know
            keeps to its ``max_delay`` (1 s at least, for a stream just created).
        rpc_timeout: The longest one attempt takes.
        back_off: Sleeps one back-off between the asks for a stream the cache does not
            know, cut short by the client's ``close()`` (``ClientCore.back_off``:
            raises ``ClientClosedError`` then).

    Thread-safe.
    """

    def __init__(
        self,
        cache: MetadataCache,
        max_age: float | None,
        refresh_once: Callable[[Sequence[str], float | None], object],
        fetch_count: Callable[[str, Budget], int],
        retry: RetryPolicy,
        rpc_timeout: float,
        back_off: Callable[[float], None],
    ) -> None:
        self._cache = cache
        self._max_age = max_age
        self._refresh_once = refresh_once
        self._fetch_count = fetch_count
        # At least the asks' own time: a client without retries still waits briefly
        # for a stream just created (its fetches keep to its policy all the same).
        self._retry = dataclasses.replace(retry, max_delay=max(retry.max_delay, _SETTLE.max_delay))
        self._rpc_timeout = rpc_timeout
        self._back_off = back_off

    def count(self, stream: str) -> int:
        """``stream``'s partition count; waits briefly for a just-created stream.

        A stream the cache does not know is asked for within one retry policy, the
        asks and their metadata fetches together (``max_delay``, 1 s at least, then one
        attempt).

        Raises:
            NoSuchStreamError: if the stream is still unknown after a short wait.
            BrokerUnavailableError: no broker answered within the policy.
            ClientClosedError: the client was closed meanwhile (from any thread).
        """
        # The cache answers almost every call (one per message a partitioner places):
        # only a stream it does not know takes the retry machinery, whose set-up costs
        # more than the look-up.
        info = self._cache.cached_stream(stream)
        if info is not None:
            max_age = self._max_age
            if max_age is None or not self._cache.claim_stale(stream, max_age):
                return len(info.partitions)
            return self._recount(stream, len(info.partitions))
        # One budget for the asks and their fetches: each fetch retried under a policy
        # of its own, and a cluster going down after a few asks took them and a policy.
        budget = Budget.of(self._retry, self._rpc_timeout)
        return call_with_retry(
            _SETTLE,
            "partition count",
            lambda _: self._fetch_count(stream, budget),
            retry_if=lambda exc: isinstance(exc, NoSuchStreamError),
            deadline=budget.retry_until,
            # Not a plain sleep: a publish waiting for a stream just created outlived
            # the client's close() by a back-off, then asked the closed client again.
            sleep=self._back_off,
        )

    def _recount(self, stream: str, cached: int) -> int:
        """``stream``'s partition count from the server, or ``cached`` if none answers.

        Without this, keys would go on being placed by the count of a stream that was
        deleted and created again, and a partition that no longer exists would fail
        publishes.
        """
        try:
            # One pass over the brokers, briefly: the publish waits for it.
            self._refresh_once([stream], time.monotonic() + RECOUNT_WITHIN)
        except LiftbridgeError as exc:
            # A broker that does not answer now must not fail publishes the cache can
            # place (nor hold them up for a retry policy's worth of attempts).
            _log.debug("refreshing the partition count of %r failed: %s", stream, exc)
            return cached
        info = self._cache.cached_stream(stream)
        # Not in the answer (deleted): the publish itself will say so.
        count = cached if info is None else len(info.partitions)
        if count != cached:
            _log.warning(
                "stream %r now has %d partitions (the cached metadata said %d): it was "
                "created again; keys are placed by the new count",
                stream,
                count,
                cached,
            )
        return count
