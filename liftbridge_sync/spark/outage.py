"""A streaming query riding out its brokers being away for a while.

Every broker unreachable (a restart of a single server, a network cut) failed the
query at the next micro-batch's planning, once the client's retry policy had given up
(``liftbridge.retry.maxDelayMs``, 10 s by default): a query reading through a 15 s
outage died. Kafka's source waits for its brokers (``default.api.timeout.ms``, 60 s
by default) in the same place. The source now plans no micro-batch while the brokers
are away, for up to :data:`OUTAGE_GRACE` seconds from the first failure, and then
fails with the last error.
"""

from __future__ import annotations

import logging
import time

from liftbridge_sync.errors import BrokerUnavailableError

__all__ = ["OUTAGE_GRACE", "BrokerOutage"]

_log = logging.getLogger("liftbridge_sync.spark")

#: Seconds a streaming query waits for its brokers before it fails.
OUTAGE_GRACE = 60.0


class BrokerOutage:
    """How long the brokers of one streaming source have been away.

    Not thread-safe: the source's, which Spark calls from one thread.
    """

    def __init__(self, stream: str) -> None:
        self._stream = stream
        self._since: float | None = None

    def endure(self, error: BrokerUnavailableError) -> None:
        """The brokers did not answer the planning of a micro-batch: returns if the
        query waits for them (no micro-batch now), with a WARNING at the first failure.

        Raises:
            BrokerUnavailableError: ``error``, once they have been away for
                :data:`OUTAGE_GRACE` seconds.
        """
        now = time.monotonic()
        if self._since is None:
            self._since = now
            _log.warning(
                "stream %r: no broker answered (%s); no micro-batch until one does, for up to %g s",
                self._stream,
                error,
                OUTAGE_GRACE,
            )
            return
        if now - self._since < OUTAGE_GRACE:
            return
        raise BrokerUnavailableError(
            f"stream {self._stream!r}: no broker answered for {now - self._since:.0f} s "
            f"(the query waits {OUTAGE_GRACE:g} s): {error}"
        ) from error

    def over(self) -> None:
        """The brokers answered: the next outage is waited for afresh (told if it
        was)."""
        if self._since is not None:
            _log.warning(
                "stream %r: the brokers answer again after %.1f s",
                self._stream,
                time.monotonic() - self._since,
            )
            self._since = None
