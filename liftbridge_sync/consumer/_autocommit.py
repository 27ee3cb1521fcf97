"""A consumer's automatic commits: when they may go ahead, and the thread making them.

With ``auto_commit=<seconds>`` the ``liftbridge-consumer-commit-<group>`` thread
(:func:`commit_loop`) commits the processed positions at that interval, and those of
partitions taken away as soon as the heartbeat hands them over; ``close()`` makes the
final commit (:meth:`AutoCommits.final`). Each holds back while the member may have
been dropped by the server (:meth:`AutoCommits.may_commit`).

Thread-safe: the state is guarded by the lock shared with the consumer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from liftbridge_sync.consumer._commits import Commits
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._readers import Readers
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.errors import LiftbridgeError

__all__ = ["AutoCommits", "commit_loop"]

_log = logging.getLogger("liftbridge_sync.consumer")


class AutoCommits:
    """The automatic commits of one member: on revoke, at the interval, on close.

    Thread-safe: ``lock`` (the consumer's) guards the withholding state and
    ``counters``.
    """

    def __init__(
        self,
        *,
        lock: threading.Lock,
        membership: Membership,
        commits: Commits,
        readers: Readers,
        counters: Counters,
    ) -> None:
        self._lock = lock
        self._membership = membership
        self._commits = commits
        self._readers = readers
        self._counters = counters
        #: An automatic commit was withheld and nothing was committed since (one log
        #: line per silence). Guarded by the lock.
        self._withholding = False

    def hand_off_once(self) -> None:
        """Commit the positions of the partitions taken away (see
        :meth:`Commits.hand_off`), unless this member may have been dropped."""
        if not self.may_commit("commit on revoke"):
            return
        try:
            self._commits.hand_off(self._membership.may_commit)
        except Exception:
            # A bug: as in commit_once, said and the thread goes on.
            _log.exception(
                "consumer %s: commit on revoke failed unexpectedly", self._membership.who
            )

    def commit_once(self) -> None:
        """One auto-commit, unless this member may have been dropped (see
        :meth:`may_commit`)."""
        if not self.may_commit("auto-commit"):
            return
        try:
            self._commits.commit(self._readers, allowed=self._membership.may_commit)
        except LiftbridgeError as exc:
            _log.warning("consumer %s: auto-commit failed: %s", self._membership.who, exc)
        except Exception:
            # A bug: said with its traceback, and the next interval tries again (the
            # thread ending would stop every later auto-commit without a word).
            _log.exception("consumer %s: auto-commit failed unexpectedly", self._membership.who)

    def final(self, partitions: Iterable[tuple[str, int]]) -> None:
        """close()'s commit: the partitions taken away, then ``partitions`` (those shut
        out of the assignment), unless this member may have been dropped."""
        if not self.may_commit("final commit"):
            return
        self._commits.hand_off(self._membership.may_commit)  # partitions taken away
        try:
            self._commits.commit(partitions, allowed=self._membership.may_commit)
        except LiftbridgeError as exc:
            _log.warning("consumer %s: final commit failed: %s", self._membership.who, exc)

    def may_commit(self, what: str) -> bool:
        """Whether an automatic commit may go ahead; counts and logs one that may not.

        Not when the coordinator has not answered for most of the consumer timeout, or
        has just said this member does not exist: the server may have dropped it and
        given its partitions to another member, which reads from the cursors as they
        were. Cursors carry no epoch, so a commit now could move one under the new
        owner (backwards: it reads again what it has read). Kafka fences such commits
        by generation; a Liftbridge member has to hold back. Logged once per silence.
        """
        silent = self._membership.silent_for()
        with self._lock:
            if silent is None:
                self._withholding = False
                return True
            self._counters.commits_withheld += 1
            first, self._withholding = not self._withholding, True
        if first:
            _log.warning(
                "consumer %s: %s withheld: the coordinator %s (the server drops a member "
                "after %.1fs without a poll); the positions are kept for the next commit",
                self._membership.who,
                what,
                "says this member does not exist"
                if self._membership.in_doubt
                else f"has not answered for {silent:.1f}s",
                self._membership.consumer_timeout,
            )
        return False


def commit_loop(
    auto_commits: Callable[[], AutoCommits | None],
    stop: threading.Event,
    handed_off: threading.Event,
    interval: float,
) -> None:
    """The ``liftbridge-consumer-commit`` thread: the positions of partitions taken
    away as soon as the heartbeat hands them over, the others every interval.

    ``auto_commits()`` gives the consumer's, or ``None`` once the consumer was
    collected (its heartbeat thread closes it): the thread holds no consumer (see
    :meth:`Consumer.__del__`).
    """
    due = time.monotonic() + interval
    while True:
        handed_off.wait(max(0.0, due - time.monotonic()))
        commits = auto_commits()
        if stop.is_set() or commits is None:
            return  # closed, or dropped: its heartbeat thread closes it
        # Cleared here too: a commit on revoke withheld waits for the interval.
        handed_off.clear()
        commits.hand_off_once()
        if time.monotonic() >= due:
            commits.commit_once()
            due = time.monotonic() + interval
        del commits
