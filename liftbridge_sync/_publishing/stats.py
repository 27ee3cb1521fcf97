"""What the publisher has done so far, for callers who watch it."""

from __future__ import annotations

import dataclasses

__all__ = ["PublisherStats"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PublisherStats:
    """Counters of a client's publisher since it started (see ``Client.publisher_stats``).

    Immutable snapshot; safe to share.
    """

    #: Publishes awaiting an ack (or, for ``AckPolicy.NONE``, their write) right now.
    in_flight: int = 0
    #: Times the ``PublishAsync`` stream was opened (the first time included).
    connects: int = 0
    #: Publishes sent on a reopened stream after the previous one broke (re-sends,
    #: and any that were waiting for it).
    resent_after_reconnect: int = 0
    #: Publishes sent again because their partition went silent and its leader showed
    #: they were lost (a leader failover, a NATS restart).
    resent_after_stall: int = 0
    #: Publishes sent again because the server could not hand them to NATS (its NATS
    #: connection was down), or answered "no such stream" for a stream the metadata
    #: lists (it had just restarted); nothing of them was stored.
    resent_after_refusal: int = 0
    #: Times a silent partition was checked with its leader.
    stall_probes: int = 0

    @property
    def resent(self) -> int:
        """All re-sends (those after a reconnect or a stall may have stored a duplicate:
        delivery is at-least-once)."""
        return self.resent_after_reconnect + self.resent_after_stall + self.resent_after_refusal
