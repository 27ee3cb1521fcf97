"""Ending a consumer: its first close() (stop reading, commit, leave, join its threads),
a second one waiting for the first, and a close() interrupted.

The steps and their order are described in :meth:`Closing.close`; the threads are
:mod:`._threads`'s, the readers :mod:`._readers`'s, the leave :mod:`._membership`'s.
Thread-safe as :class:`Closing` says.
"""

from __future__ import annotations

import logging
import threading
import time

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.consumer._autocommit import AutoCommits
from liftbridge_sync.consumer._commits import Commits
from liftbridge_sync.consumer._mailbox import Mailbox, PartitionReader
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._readers import Readers
from liftbridge_sync.consumer._standing import Standing
from liftbridge_sync.consumer._threads import Threads
from liftbridge_sync.errors import ConsumerGroupNotFoundError, NotGroupMemberError

__all__ = ["Closing"]

_log = logging.getLogger("liftbridge_sync.consumer")


class Closing:
    """How one consumer ends (see :meth:`Consumer.close`), composed of the parts it
    stops, which share the consumer's lock.

    Thread-safe: :meth:`close` may be called from any thread, several times; the first
    call is told from the others under the consumer's lock.
    """

    def __init__(
        self,
        core: ClientCore,
        group: str,
        *,
        lock: threading.Lock,
        threads: Threads,
        standing: Standing,
        membership: Membership,
        readers: Readers,
        commits: Commits,
        mailbox: Mailbox,
        autocommit: AutoCommits,
        auto_commit: float | None,
    ) -> None:
        self._core = core
        self._group = group
        self._lock = lock
        self._threads = threads
        self._standing = standing
        self._membership = membership
        self._readers = readers
        self._commits = commits
        self._mailbox = mailbox
        self._autocommit = autocommit
        self._auto_commit = auto_commit

    @property
    def _who(self) -> str:
        """``<group>/<member id>`` for log lines (as :attr:`Consumer._who`)."""
        return f"{self._group}/{self._standing.consumer_id}"

    def close(self) -> None:
        """Stop reading, commit (with auto-commit), leave the group, join threads (see
        :meth:`Consumer.close`, which this is)."""
        if self._core.forked:
            self._standing.closed = True
            return
        # Whether this is the first close(): known before the consumer is marked
        # closed, so that a Ctrl-C landing anywhere after that still ends what runs.
        first = False
        try:
            with self._lock:
                first = not self._standing.closed
                if first:
                    self._standing.closed = True
                    self._threads.closing()
                    readers = self._readers.shut()
                    failure = self._standing.failure
            if not first:
                self._threads.wait_for_close(self.bound(), self._who)
                return
            dropped = isinstance(failure, ConsumerGroupNotFoundError | NotGroupMemberError)
            self._close(readers, dropped)
        except BaseException:
            if first:
                self._abandon()
            raise
        finally:
            if first:
                self._threads.closed()

    def _abandon(self) -> None:
        """A first close() interrupted (a Ctrl-C while it waits for a thread or a
        commit, or as it marks the consumer closed): every thread is told to end,
        without waiting for it, the heartbeat among them, which would otherwise poll
        on, keeping the member in its group with partitions nobody reads for the
        process's life (a second close() finds this one ended); the iteration ends.
        The server's consumer timeout removes the member."""
        self._threads.stop.set()
        self._membership.stop_rejoining()
        self._commits.handed_off.set()  # wakes the commit thread
        self._threads.stop_polling.set()
        self._standing.settled.set()
        self._mailbox.close()
        with self._lock:
            readers = self._readers.shut()  # those shut before too
        for reader in readers:
            self._readers.stop(reader)

    def bound(self) -> float:
        """Seconds a close() takes at most, every call it makes timing out."""
        options = self._core.options
        policy = max(options.retry.max_delay, options.rpc_timeout)
        return options.rpc_timeout * 2 + 1.0 + policy * 2 + self._membership.consumer_timeout

    def _close(self, readers: list[PartitionReader], dropped: bool) -> None:
        """The first close(): ``readers`` are those shut out of the assignment."""
        self._threads.stop.set()
        # A rejoin in progress (on the heartbeat thread) ends now, not once its join
        # call's retries give up: those outlasted the bound the threads get below.
        self._membership.stop_rejoining()
        self._commits.handed_off.set()  # wakes the commit thread
        self._standing.settled.set()
        # The iteration ends now, not once the threads below were joined (up to the
        # deadline) and the final commit made: nothing it could still hand out would
        # count (the readers are shut), and a second close() (Client.close()'s) still
        # waits for this one to end.
        self._mailbox.close()
        # One deadline for every thread: a thread stuck in a call (a hung leader: up to
        # rpc_timeout per attempt) ends by itself once the call returns, and waiting for
        # each in turn made close() last that long per reader.
        deadline = time.monotonic() + self._core.options.rpc_timeout * 2 + 1.0
        running = self._readers.stop_all(readers, deadline)
        running += self._threads.join_others(deadline)
        running += self._readers.join_stopped(deadline)  # stopped by the heartbeat meanwhile
        # The heartbeat still polls: the member stays in the group (and may commit)
        # however long the wait above was.
        if self._auto_commit is not None:
            self._autocommit.final((r.stream, r.partition) for r in readers)
        running += self._threads.end_heartbeat(deadline)
        if running:
            _log.warning(
                "consumer %s: closing without waiting longer for %s, stuck in a call; they "
                "end by themselves once it returns",
                self._who,
                running,
            )
        if not dropped:  # a member the server dropped has no group to leave
            self._membership.leave()
