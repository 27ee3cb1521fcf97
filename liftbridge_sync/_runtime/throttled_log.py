"""A warning about what a peer sends, logged at most once a minute.

Bytes from the network that the client skips (an undecodable ack on a NATS inbox, a
message on ``__activity`` that is no event) deserve a WARNING, but a peer that sends
thousands of them must not flood the application's log: the first is logged, then at
most one an interval, saying how many were held back in between.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["ThrottledWarning"]

#: Seconds between two warnings of one :class:`ThrottledWarning`.
INTERVAL = 60.0


class ThrottledWarning:
    """Log a WARNING at most once per ``interval`` seconds; count the others.

    Args:
        logger: Where the warnings go.
        interval: Seconds of quiet after each warning logged.
        clock: Monotonic clock (tests give their own).

    Thread-safe: the count and the quiet period are kept under a lock of its own.
    """

    __slots__ = ("_clock", "_held", "_interval", "_lock", "_logger", "_quiet_until")

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._held = 0
        self._quiet_until: float | None = None

    def warning(self, message: str, *args: object) -> bool:
        """Log ``message % args`` unless one was logged less than ``interval`` ago;
        whether it was logged. A warning logged after some were held back says how many.
        """
        with self._lock:
            now = self._clock()
            if self._quiet_until is not None and now < self._quiet_until:
                self._held += 1
                return False
            held, self._held = self._held, 0
            self._quiet_until = now + self._interval
        if held:
            message += " (%d more like it held back since the last warning)"
            args = (*args, held)
        self._logger.warning(message, *args)
        return True
