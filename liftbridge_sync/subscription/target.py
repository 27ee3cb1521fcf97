"""What a partition subscription reads: :class:`SubscriptionTarget`, fixed for its life.

Immutable, so shareable between threads.
"""

from __future__ import annotations

import dataclasses

from liftbridge_sync._proto import api_pb2

__all__ = ["SubscriptionTarget"]


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
