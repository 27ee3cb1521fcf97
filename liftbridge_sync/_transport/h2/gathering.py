"""Reading the acks of pipelined publishes in bulk: what the publish I/O thread waits for.

A broker answers a burst of publishes in several TCP segments, and every wake-up of the
I/O thread costs tens of microseconds (the poll, the GIL, a read, a hand-off to the
publisher thread). While acks for many pipelined publishes are due, :class:`AckGathering`
asks the kernel to report the socket readable only once the bytes of all of them could
be there (``SO_RCVLOWAT``), and bounds the wait by ``ack_read_delay``: after that the
thread reads whatever arrived. A burst of acks is then read in one or two turns instead
of one per segment, at the price of the first acks of a burst resolving up to the delay
later. Nothing is gathered while a ``publish()`` caller waits for its own ack, while
requests are still unwritten (flow control: the window updates must wake the thread), or
while the stream closes.
"""

from __future__ import annotations

import socket
from typing import Protocol

__all__ = ["MOST_GATHERED", "AckGathering"]

#: The most bytes waited for at once (a few hundred acks): beyond this, waiting longer
#: saves little and only holds acks back.
MOST_GATHERED = 64 * 1024
_SO_RCVLOWAT: int | None = getattr(socket, "SO_RCVLOWAT", None)


class Asked(Protocol):
    """Where the count of requests written that the broker answers, and that count when
    a ``publish()`` caller last queued its own request, are kept (the stream's
    :class:`~.outbound_queue.OutboundQueue`)."""

    asked: int
    direct_mark: int


class AckGathering:
    """The low-water mark of one publish connection's socket.

    ``counts.asked`` (requests queued that the broker answers, ack policy LEADER or ALL)
    and ``counts.direct_mark`` (``asked`` when a ``publish()`` caller last queued its own
    request) are written by publishing threads under the stream's lock;
    everything else runs on the thread holding the stream's I/O lock. Not thread-safe
    beyond that.
    """

    __slots__ = ("_answered", "_counts", "_delay", "_lowat", "_per_ack", "_sock")

    def __init__(self, sock: socket.socket, delay: float | None, counts: Asked) -> None:
        self._sock = sock
        self._counts = counts
        self._delay = delay if _SO_RCVLOWAT is not None else None
        self._lowat = 1  # the socket's SO_RCVLOWAT as we last set it
        self._per_ack = 0  # fewest bytes read per response so far (0: nothing read yet)
        self._answered = 0  # responses read

    @property
    def due(self) -> int:
        """Responses still to come (an estimate: lost answers count until forgotten)."""
        return self._counts.asked - self._answered

    def awaited(self, responses: int) -> bool:
        """Whether ``publish()`` callers may be among those the last ``responses`` read
        wake: the last one wrote its own request after the answers before them. (Only
        the last caller's mark is kept, so this says that callers of ``publish()`` are
        active, not that this batch holds one's answer.)"""
        return self._counts.direct_mark > self._answered - responses

    def answered(self, nbytes: int, responses: int) -> None:
        """A read brought ``responses`` whole responses, ``nbytes`` on the wire (their
        DATA frames only: the broker's PINGs and WINDOW_UPDATEs in the same read would
        make an ack look larger, and the reader wait for bytes that never come)."""
        self._answered += responses
        per_ack = nbytes // responses
        if not self._per_ack or per_ack < self._per_ack:
            # The smallest seen: an overestimate would wait for bytes that never come.
            self._per_ack = per_ack

    def forget(self) -> None:
        """Stop waiting for answers that are overdue (after an ack timeout: the broker
        may never send them)."""
        self._answered = self._counts.asked

    def plan(self, quiet: bool) -> float | None:
        """Before the I/O thread waits: set the socket's low-water mark for the acks
        due; the longest to wait for them (``None``: no limit, any byte wakes it).

        ``quiet``: everything queued is written and the stream is not closing.
        """
        want = 1
        if quiet and self._delay is not None and self._per_ack:
            due = self.due
            # Until direct_mark responses are read, a caller waits for one of them.
            if due > 1 and self._counts.direct_mark <= self._answered:
                want = min(due * self._per_ack, MOST_GATHERED)
        if want != self._lowat:
            self._set(want)
        return self._delay if self._lowat > 1 else None

    def release(self) -> None:
        """Any byte wakes the reader again (a caller now waits for its own ack).
        Lowering the mark reports the socket readable at once if enough is there."""
        if self._lowat > 1:
            self._set(1)

    def _set(self, lowat: int) -> None:
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_RCVLOWAT or 0, lowat)
        except OSError:
            # A platform without it: read every segment as it comes, as before.
            self._delay = None
            self._lowat = 1
            return
        self._lowat = lowat
