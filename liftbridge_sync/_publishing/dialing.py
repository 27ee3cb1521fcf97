"""When to give up on publishes that never reached a broker.

The publisher reconnects its stream for as long as anything is pending: each publish's
own ack timeout bounds how long it waits. That is right for publishes that were written
to a broker (the broker may have stored them; only an ack or its timeout tells), but a
publish that no broker ever saw has nothing to wait for when no broker can be reached.
:class:`DialAttempts` counts the failed attempts to open a stream in a row and says when
they used up the client's retry policy (``max_attempts`` or ``max_delay``, like every
other call); the publisher then fails the publishes that were never written with a
:class:`~liftbridge_sync.errors.BrokerUnavailableError` naming the addresses tried.
"""

from __future__ import annotations

from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError
from liftbridge_sync.options import RetryPolicy

__all__ = ["DialAttempts"]


class DialAttempts:
    """Failed attempts to open the publish stream since the last one that worked.

    Owner thread only (not thread-safe).
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._since: float | None = None  # when the first failure of this run happened
        self._count = 0
        self._tried: dict[str, None] = {}  # addresses, in order, without repeats
        self._last: LiftbridgeError | None = None

    def failed(self, address: str, error: LiftbridgeError, now: float) -> None:
        """Record a failed attempt on ``address``."""
        if self._since is None:
            self._since = now
        self._count += 1
        self._tried[address] = None
        self._last = error

    def succeeded(self) -> None:
        """A stream opened (its broker answered): the run of failures is over."""
        self._since = None
        self._count = 0
        self._tried.clear()
        self._last = None

    def exhausted(self, now: float) -> bool:
        """Whether the run of failures used up the retry policy."""
        if self._since is None:
            return False
        policy = self._policy
        return self._count >= policy.max_attempts or now - self._since >= policy.max_delay

    def error(self, now: float) -> BrokerUnavailableError:
        """Why publishes that were never written fail."""
        elapsed = 0.0 if self._since is None else now - self._since
        tried = ", ".join(self._tried) or "none"
        return BrokerUnavailableError(
            f"publish: no broker reachable ({self._count} attempts in {elapsed:.1f}s; "
            f"tried {tried}): {self._last}",
            code="UNAVAILABLE",
        )
