"""When our HTTP/2 connections may send a PING without being punished for it.

A grpc-go server (every Liftbridge broker) counts a *strike* for each PING that comes
sooner than its enforcement policy's ``MinTime`` (5 minutes by default) after the
previous one, unless the server sent DATA or HEADERS in between; after more than two
strikes it ends the connection with ``GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")``,
and a publish connection ended that way re-sends its whole window (duplicates). So a
PING goes out only when one of these holds, as grpc's own C-core client does by
default (``grpc.http2.min_time_between_pings_ms``, ``grpc.http2.max_pings_without_data``):

* it is the connection's first PING, or the broker sent data since the last one;
* ``min_interval`` seconds passed since the last one, and fewer than
  ``max_without_data`` PINGs went out since the broker last sent data (0: no limit).

With the defaults (300 s, 2) a connection never earns a strike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MAX_PINGS_WITHOUT_DATA", "MIN_PING_INTERVAL", "PingPolicy"]

#: grpc-go's default ``keepalive.EnforcementPolicy.MinTime``, seconds.
MIN_PING_INTERVAL = 300.0
#: grpc's C-core default ``grpc.http2.max_pings_without_data``.
MAX_PINGS_WITHOUT_DATA = 2


class PingPolicy:
    """Whether a PING may go out now (see the module).

    Used by one connection's I/O thread at a time (not thread-safe).
    """

    def __init__(
        self,
        min_interval: float = MIN_PING_INTERVAL,
        max_without_data: int = MAX_PINGS_WITHOUT_DATA,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._min_interval = min_interval
        self._max_without_data = max_without_data
        self._clock = clock
        self._last: float | None = None  # when the last PING went out
        self._without_data = 0  # PINGs since the broker last sent data

    @property
    def min_interval(self) -> float:
        """Seconds between PINGs without data in between."""
        return self._min_interval

    @property
    def max_without_data(self) -> int:
        """PINGs allowed since the broker last sent data (0: no limit)."""
        return self._max_without_data

    def next_allowed(self) -> float:
        """The earliest monotonic time a PING may go out (``inf``: not until data)."""
        if self._last is None or self._without_data == 0:
            return -float("inf")
        if self._max_without_data and self._without_data >= self._max_without_data:
            return float("inf")
        return self._last + self._min_interval

    def may_ping(self) -> bool:
        """Whether a PING may go out now."""
        return self._clock() >= self.next_allowed()

    def pinged(self) -> None:
        """A PING went out."""
        self._last = self._clock()
        self._without_data += 1

    def data_received(self) -> None:
        """The broker sent DATA or HEADERS (which resets grpc-go's strikes)."""
        self._without_data = 0

    @classmethod
    def from_grpc_options(cls, settings: dict[str, object]) -> PingPolicy:
        """The policy ``grpc_options`` ask for (grpc's C-core names), else the defaults."""
        interval = settings.get("grpc.http2.min_time_between_pings_ms")
        limit = settings.get("grpc.http2.max_pings_without_data")
        return cls(
            float(interval) / 1000
            if isinstance(interval, int | float)
            and not isinstance(interval, bool)
            and interval >= 0
            else MIN_PING_INTERVAL,
            limit
            if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0
            else MAX_PINGS_WITHOUT_DATA,
        )
