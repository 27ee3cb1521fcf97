"""Reads riding out their brokers being away for a while.

Every broker unreachable (a restart of a single server, a network cut) failed a
streaming query at the next micro-batch's planning, and a read task that was opening
its subscription, once the client's retry policy had given up
(``liftbridge.retry.maxDelayMs``, 10 s by default): a query reading through a 15 s
outage died. Kafka's source waits for its brokers (``default.api.timeout.ms``, 60 s
by default) in the same places. The source now plans no micro-batch, and a read task
subscribes again, while the brokers are away, for up to :data:`OUTAGE_GRACE` seconds
from the first failure, and then fails with the last error. A broker back from the
outage says "no such stream" of streams it has yet to recover: within an outage, a
read task takes that as the outage going on.
"""

from __future__ import annotations

import logging
import time

from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError

__all__ = ["OUTAGE_GRACE", "OUTAGE_PAUSE", "BrokerOutage"]

_log = logging.getLogger("liftbridge_sync.spark")

#: Seconds a streaming query, or a read task, waits for its brokers before it fails.
OUTAGE_GRACE = 60.0
#: Pause between a read task's subscriptions while its brokers are away (back-off).
OUTAGE_PAUSE = 0.5


class BrokerOutage:
    """How long the brokers of one stream's reads have been away.

    Args:
        stream: The stream, for the log lines.
        waiting: What waits meanwhile, for the log lines.

    Not thread-safe: one reader's (a streaming source, which Spark calls from one
    thread, or a read task).
    """

    def __init__(self, stream: str, waiting: str = "no micro-batch") -> None:
        self._stream = stream
        self._waiting = waiting
        self._since: float | None = None

    @property
    def under_way(self) -> bool:
        """Whether the brokers are away (no answer since the last failure)."""
        return self._since is not None

    def endure(self, error: LiftbridgeError) -> None:
        """The brokers did not answer: returns if the read waits for them, with a
        WARNING at the first failure.

        Raises:
            BrokerUnavailableError: from ``error``, once they have been away for
                :data:`OUTAGE_GRACE` seconds.
        """
        now = time.monotonic()
        if self._since is None:
            self._since = now
            _log.warning(
                "stream %r: no broker answered (%s); %s until one does, for up to %g s",
                self._stream,
                error,
                self._waiting,
                OUTAGE_GRACE,
            )
            return
        if now - self._since < OUTAGE_GRACE:
            return
        raise BrokerUnavailableError(
            f"stream {self._stream!r}: no broker answered for {now - self._since:.0f} s "
            f"(reads wait {OUTAGE_GRACE:g} s): {error}"
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
