"""A consumer's counters and their frozen snapshot, :class:`ConsumerStats`.

The counters are written by the consumer's threads under the lock the consumer shares
with its membership, readers and commits; :meth:`Counters.snapshot` copies them under that lock.
"""

from __future__ import annotations

import dataclasses

__all__ = ["ConsumerStats", "Counters"]


@dataclasses.dataclass(frozen=True)
class ConsumerStats:
    """What a consumer-group member went through since it was created.

    Attributes:
        delivered: Messages handed out by the iterator (or :meth:`Consumer.get`).
        rejoins: Times the server had dropped this member and it joined again.
        expected_races: Partition reads refused or ended because another member
            subscribed with a newer group epoch (the normal race of a rebalance:
            "Consumer is not currently assigned this partition"); such a reader is
            restarted at the next poll if the partition is still this member's.
        coordinator_changes: Times the member learnt of a new group coordinator.
        reader_restarts: Partition readers started again after failing or ending.
        commits_withheld: Automatic commits (the periodic one, the one on close) not
            made because the coordinator had not answered this member for most of the
            server's consumer timeout, or had said it does not exist: the server may
            have given its partitions to another member already. The positions stay
            for the next commit.

    Immutable, so thread-safe.
    """

    delivered: int = 0
    rejoins: int = 0
    expected_races: int = 0
    coordinator_changes: int = 0
    reader_restarts: int = 0
    commits_withheld: int = 0


@dataclasses.dataclass
class Counters:
    """The live counters behind :class:`ConsumerStats`.

    Not thread-safe by itself: update and snapshot it under the consumer's lock.
    """

    delivered: int = 0
    rejoins: int = 0
    expected_races: int = 0
    coordinator_changes: int = 0
    reader_restarts: int = 0
    commits_withheld: int = 0

    def snapshot(self) -> ConsumerStats:
        """A frozen copy."""
        return ConsumerStats(**dataclasses.asdict(self))
