"""Noticing a publish connection whose broker stopped answering while acks are due.

A broker process that stopped (SIGSTOP, a hung disk) keeps its TCP connections up, and
its kernel acknowledges whatever fits in its buffers, so ``TCP_USER_TIMEOUT`` only
fires once those are full. :class:`StallWatch` covers the rest: while acks are due and
nothing at all has been read for half the bound (``keepalive_timeout``), one PING goes
out, and nothing read within the other half ends the connection (the publisher then
reconnects with back-off and re-sends what was not acknowledged). So a stall is noticed
within about 1.25 times the bound (20 s by default: 25 s), the I/O thread waking every
quarter of it to look.

Only one such PING goes out until the broker answers a request again: grpc-go servers
tolerate PINGs after they sent data (they reset their ping strikes on every write), and
answer more than two without data in between with ``GOAWAY(ENHANCE_YOUR_CALM,
"too_many_pings")``. Used by the connection's I/O thread only (not thread-safe).
"""

from __future__ import annotations

__all__ = ["StallWatch"]


class StallWatch:
    """When to PING a silent broker that owes acks (see the module)."""

    def __init__(self, bound: float) -> None:
        self._half = bound / 2
        self._period = bound / 4
        self._quiet_since = 0.0  # when acks were last seen due from a quiet start
        self._pinged = False  # a stall PING went out since the last answer

    def wake_in(self) -> float:
        """Seconds until the I/O thread should look again at the latest."""
        return self._period

    def answered(self) -> None:
        """Responses arrived: the broker is alive, and a later stall may PING again."""
        self._pinged = False

    def check(self, now: float, last_read: float, due: int) -> float | None:
        """The seconds to wait for the answer to a PING to send now, or ``None``."""
        if due <= 0:
            self._quiet_since = now  # nothing owed: silence is fine
            return None
        if self._pinged or now - max(last_read, self._quiet_since) < self._half:
            return None
        self._pinged = True
        return self._half
