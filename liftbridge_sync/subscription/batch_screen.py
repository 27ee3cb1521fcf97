"""What of each batch of wire messages a forward partition read may deliver, and what
is done with the rest.

The rules are :mod:`liftbridge_sync.subscription.screening`'s pure functions; this
applies them to one read: a message past the stop position ends the read before it;
one out of order, or naming another stream or partition, is never handed out (logged,
counted in the subscription's stats, and the call dropped so that the next read
resubscribes after the last delivered offset); messages before the requested start are
skipped until the first is delivered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.opening import SubscribeCall
from liftbridge_sync.subscription.connection import PartitionConnection
from liftbridge_sync.subscription.screening import before_start, misaddressed, screen

__all__ = ["BatchScreen"]

_log = logging.getLogger("liftbridge_sync.subscription")


class BatchScreen:
    """The screening of one partition subscription's forward reads.

    Args:
        conn: The subscription's connection: its target, position and counters, and
            the call it drops to resubscribe.
        delivered: The last delivered wire message if still at hand (for the
            out-of-order log line), through a weak reference to its owner (``None``
            once that is gone).

    Not thread-safe: the iterating thread's, as the subscription's reads are.
    """

    def __init__(
        self,
        conn: PartitionConnection,
        delivered: Callable[[], Callable[[], api_pb2.Message | None] | None],
    ) -> None:
        self._conn = conn
        self._delivered_ref = delivered
        #: The last offset a forward read may deliver (``None``: no stop offset).
        self._stop_offset = conn.target.stop_offset

    def _delivered(self) -> api_pb2.Message | None:
        delivered = self._delivered_ref()
        return None if delivered is None else delivered()

    def screen(self, call: SubscribeCall, batch: list[api_pb2.Message]) -> list[api_pb2.Message]:
        """What of ``batch`` may be delivered (forward reads only; the rules are
        :func:`~liftbridge_sync.subscription.screening.screen`'s).

        A message past the stop position ends the subscription before it. An
        out-of-order one is never handed out: it is logged, counted in ``stats()``, and
        the call is dropped so the next read resubscribes after the last delivered offset.
        """
        target = self._conn.target
        stray = misaddressed(batch, target.stream, target.partition)
        if stray is not None:
            self._refuse_misaddressed(call, batch, stray)
            batch = batch[:stray]
            if not batch:
                return batch
        if self._conn.last_offset is None:
            batch = self._skip_before_start(batch)
            if not batch:
                return batch
        good, cut = screen(
            batch, self._conn.last_offset, self._stop_offset, target.stop_timestamp_ns
        )
        if good and self._conn.disorder:
            self._conn.disorder = 0  # in order again: the resubscribe budget starts afresh
            self._conn.broken_since = None
        if cut is not None:
            self._conn.finish(call)
            self._conn.nothing_left = True  # the rest is past the stop
            return batch[:cut]
        if good < len(batch):
            self._refuse_out_of_order(call, batch, good)
            return batch[:good]
        return batch

    def _skip_before_start(self, batch: list[api_pb2.Message]) -> list[api_pb2.Message]:
        """``batch`` without its messages before the requested start (see
        :func:`~liftbridge_sync.subscription.screening.before_start`); before the first
        delivered message only.
        """
        target = self._conn.target
        start = target.start_offset
        skipped = 0 if start is None else before_start(batch, start, target.start_timestamp_ns)
        if not skipped:
            return batch
        _log.debug(
            "subscription %s/%d: skipped offsets %d-%d, before the requested start",
            target.stream,
            target.partition,
            batch[0].offset,
            batch[skipped - 1].offset,
        )
        return batch[skipped:]

    def _refuse_out_of_order(
        self, call: SubscribeCall, batch: list[api_pb2.Message], bad: int
    ) -> None:
        """Log and count ``batch[bad]``, and drop the call to resubscribe."""
        pb = batch[bad]
        before = batch[bad - 1] if bad else self._delivered()
        self._conn.out_of_order += 1
        self._refuse(
            call,
            batch,
            bad,
            "offset %d (payload %d bytes) after offset %s (payload %s bytes) was delivered",
            pb.offset,
            len(pb.value),
            batch[bad - 1].offset if bad else self._conn.last_offset,
            "?" if before is None else len(before.value),
        )

    def _refuse_misaddressed(
        self, call: SubscribeCall, batch: list[api_pb2.Message], bad: int
    ) -> None:
        """Log and count ``batch[bad]``, which names another stream or partition, and
        drop the call to resubscribe."""
        pb = batch[bad]
        self._conn.misaddressed += 1
        self._refuse(
            call, batch, bad, "offset %d of %r partition %d", pb.offset, pb.stream, pb.partition
        )

    def _refuse(
        self, call: SubscribeCall, batch: list[api_pb2.Message], bad: int, what: str, *args: object
    ) -> None:
        """Log ``batch[bad]`` (``what``, with ``args``) as refused, and drop the call.

        WARNING: worked around (nothing wrong is delivered); ERROR is for what is given
        up on and raised (the README's levels). A restarted v1.9.0 leader sends
        offsets out of order.
        """
        target = self._conn.target
        after = batch[bad - 1].offset if bad else self._conn.last_offset
        _log.warning(
            "subscription %s/%d: the server sent " + what + "; dropped, resubscribing after "
            "offset %s",
            target.stream,
            target.partition,
            *args,
            after,
        )
        self._resubscribe_after_refusal(call)

    def _resubscribe_after_refusal(self, call: SubscribeCall) -> None:
        """Drop ``call`` after a refused message: the next read resubscribes after the
        last delivered offset (a server that keeps sending such messages uses up
        ``resubscribe_wait`` and is given up on)."""
        self._conn.disorder += 1
        self._conn.forget(call)
        call.cancel()
        self._conn.stale = True
        if self._conn.broken_since is None:
            self._conn.broken_since = time.monotonic()
