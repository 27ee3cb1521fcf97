"""What a refused or failed Subscribe means for a partition subscription.

A refusal's status alone is often ambiguous on v1.9.0: NOT_FOUND comes from a deleted
stream and from a restarted server still recovering its partitions, and "segment has
been closed" from a paused partition and from one caught mid-compaction. Fresh
metadata, asked by :class:`RefusalExplainer`, tells them apart; :func:`open_failure`
types the rest (the end of the read, a timeout, a broker to retry). Not thread-safe by
itself: only the iterating thread connects and asks.
"""

from __future__ import annotations

import time

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    PartitionPausedError,
    ReadonlyPartitionError,
)
from liftbridge_sync.models._metadata import is_paused
from liftbridge_sync.subscription.lookup import PartitionLookup
from liftbridge_sync.subscription.target import SubscriptionTarget

__all__ = ["Closed", "Ended", "ReadTimeout", "RefusalExplainer", "open_failure"]

#: Server details of INTERNAL when a reverse read finds an empty log.
_EMPTY_LOG_HINTS = ("segment not found", "empty")
#: Server details of INVALID_ARGUMENT when the stop offset is already behind us.
_STOP_BEFORE_START = "stop offset is before start offset"


class Ended(Exception):
    """The server says there is nothing (more) to read."""


class Closed(Exception):
    """The subscription was closed while connecting."""


class ReadTimeout(Exception):
    """The caller's ``get`` deadline passed while connecting."""


class RefusalExplainer:
    """Asks fresh metadata what a refusal of one partition's Subscribe means.

    Not thread-safe: the iterating thread asks (and reads and resets
    :attr:`missing_since`).
    """

    def __init__(
        self, core: ClientCore, target: SubscriptionTarget, lookup: PartitionLookup
    ) -> None:
        self._core = core
        self._target = target
        self._lookup = lookup
        #: When fresh metadata first lacked the stream during the resubscribe under way
        #: (None: it did not, or listed it again since); see :meth:`not_found`.
        self.missing_since: float | None = None

    def paused(
        self, deadline: float | None, until: float | None = None, ends: float | None = None
    ) -> PartitionPausedError | None:
        """The error to raise if fresh metadata says the partition is paused.

        Asked within ``deadline`` (the get's) and ``until`` (the end of a resubscribe's
        ``resubscribe_wait``; a read that broke on a pause gives now: one attempt's
        time), as :meth:`.PartitionLookup.address` asks, and by ``ends`` (the end of the
        resubscribe attempt that met the refusal, :meth:`.PartitionLookup.attempt_ends`)
        if given. With neither, each broker may take ``rpc_timeout``.

        Raises:
            ClientClosedError: closed meanwhile (or the client).
        """
        target = self._target
        try:
            self._lookup.refresh(deadline, until, ends)
        except BrokerUnavailableError:
            return None  # cannot tell: keep retrying the refusal as transient
        info = self._core.metadata.get().partition(target.stream, target.partition)
        if info is None or not is_paused(info):
            return None
        return PartitionPausedError(
            f"partition {target.stream!r}/{target.partition} is paused: subscribe with "
            "resume=True to resume it (command line: --resume), or publish to it"
        )

    def not_found(
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
        A restarted server answers without its streams too until it has recovered them,
        so on a resubscribe (``until`` given) an answer without the stream confirms the
        deletion only once the absence lasted the retry policy's ``max_delay`` (longer
        than a restart takes, as the publishing path judges), or at the end of
        ``resubscribe_wait`` (the connection's retry loop); a stream this client deleted
        itself is gone at once. On the first connect a stream the cache listed is
        retried under its retry policy, one it did not is gone at once. The client's
        shared cache is not trimmed by the answer
        (the other partitions' subscriptions and the publisher read it, and a recovering
        server's answer would drop a live stream for them): only a confirmed deletion
        leaves it.
        """
        target = self._target
        metadata = self._core.metadata
        cached = target.stream in metadata.get().streams
        try:
            answer = self._lookup.refresh(deadline, until, ends)
        except BrokerUnavailableError as unreachable:
            return unreachable  # retryable: ask again on the next attempt
        if target.stream not in answer.streams:
            now = time.monotonic()
            if until is None and cached:
                # The first connect: its retry policy bounds the asking.
                return _missing(target.stream, exc)
            if until is not None and not metadata.deleted_here(target.stream):
                if self.missing_since is None:
                    self.missing_since = now
                if now - self.missing_since < self._core.options.retry.max_delay:
                    return _missing(target.stream, exc)
            metadata.forget_stream(target.stream)
            return NoSuchStreamError(
                f"no such stream: {target.stream!r}", code=exc.code, details=exc.details
            )
        snapshot = metadata.get()
        self.missing_since = None
        if snapshot.partition(target.stream, target.partition) is None:
            return exc
        return BrokerUnavailableError(
            f"partition {target.stream!r}/{target.partition} is not served yet "
            f"(the server is recovering it): {exc}",
            code=exc.code,
            details=exc.details,
        )


def _missing(stream: str, exc: NoSuchPartitionError) -> BrokerUnavailableError:
    """A NOT_FOUND while fresh metadata lacks ``stream``, not (yet) taken for a deletion."""
    return BrokerUnavailableError(
        f"stream {stream!r} is missing from the metadata (deleted, or the server is "
        f"recovering it): {exc}",
        code=exc.code,
        details=exc.details,
    )


def open_failure(
    exc: LiftbridgeError,
    address: str,
    *,
    timed_out: bool,
    deadline: float | None,
    reverse: bool,
    resubscribing: bool,
) -> Exception:
    """What to raise for ``exc``, the failure of a Subscribe to ``address`` before its
    handshake (``timed_out``: the call was cancelled by its own timer); ``exc`` itself
    if it is already typed as a refused open. Any thread (pure)."""
    code = exc.code
    if timed_out and code == "CANCELLED":
        if deadline is not None and time.monotonic() >= deadline:
            return ReadTimeout()
        return BrokerUnavailableError(f"subscribe: no handshake from {address} in time")
    if code == "CANCELLED":
        return BrokerUnavailableError(f"subscribe: call to {address} was cancelled")
    if isinstance(exc, ReadonlyPartitionError):
        return Ended()  # STOP_LATEST on an empty partition, or nothing left to read
    details = exc.details.lower()
    if reverse and code == "INTERNAL" and any(hint in details for hint in _EMPTY_LOG_HINTS):
        return Ended()
    if (
        code == "INVALID_ARGUMENT"
        and _STOP_BEFORE_START in details
        and (resubscribing or not reverse)
    ):
        # Nothing at or before the stop lies at or after the start: an empty range
        # (a start past the end, a stop below the oldest retained offset), or the
        # stop position was delivered just before the stream broke.
        return Ended()
    # Already typed by the transport, as a refused open.
    return exc
