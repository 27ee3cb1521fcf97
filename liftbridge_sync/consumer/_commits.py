"""A consumer's positions per partition: delivered, processed, committed as cursors.

The messages the consumer's iterator handed out last are *delivered*; they count as
*processed* once the iterator is asked for more (or a commit, or the end of a ``with``
block, says so; see :class:`~liftbridge_sync.consumer.group.Consumer`), and only for
partitions still assigned. :meth:`Commits.commit` stores the processed positions not
yet committed as cursors under the group's cursor id. The partition readers
(:mod:`._readers`) hand the positions of partitions taken away over to
:meth:`Commits.hand_off` (with auto-commit) and record the cursors they start from.

Thread-safe as :class:`Commits` says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Iterable

from liftbridge_sync._transport import cursors
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.consumer._mailbox import PartitionReader
from liftbridge_sync.errors import CommitError, DeadlineExceededError, LiftbridgeError
from liftbridge_sync.models import Message

__all__ = ["Commits", "Key"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: A partition: ``(stream, partition)``.
Key = tuple[str, int]


class _Attempts:
    """How one commit stores its cursors: the whole retry policy until one fails, then
    one attempt each of at most ``rpc_timeout``, within ``max(max_delay, rpc_timeout)``
    of that failure (past it none), so that a dead ``__cursors`` leader costs one policy
    per commit, not one per partition.

    Not thread-safe: one per commit, used by the committing thread only.
    """

    def __init__(self, core: ClientCore, cursor_id: str) -> None:
        self._core = core
        self._cursor_id = cursor_id
        #: Set by the first failure: the end of the single attempts after it.
        self._until: float | None = None

    def spent(self) -> bool:
        """Whether the time after the first failure is up: no cursor is tried now."""
        return self._until is not None and time.monotonic() >= self._until

    def store(self, key: Key, offset: int) -> None:
        """Store ``offset`` as ``key``'s cursor.

        Raises:
            DeadlineExceededError: not tried, the time after the first failure is up.
            LiftbridgeError: the cursor could not be stored.
        """
        options = self._core.options
        if self._until is None:
            try:
                cursors.set_cursor(self._core, self._cursor_id, key[0], key[1], offset)
            except LiftbridgeError:
                budget = max(options.retry.max_delay, options.rpc_timeout)
                self._until = time.monotonic() + budget
                raise
            return
        left = self._until - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError(
                "not tried: the commit's time after its first failure was up"
            )
        cursors.set_cursor_once(
            self._core, self._cursor_id, key[0], key[1], offset, min(options.rpc_timeout, left)
        )


class Commits:
    """The delivered, processed and committed positions of one member; its commits.

    Thread-safe: the positions are guarded by ``lock``, the lock the consumer shares
    with its collaborators; the methods that say so must be called with it held, the
    others take it. Commits are serialized by a lock of their own.
    """

    def __init__(self, core: ClientCore, cursor_id: str, lock: threading.Lock) -> None:
        self._core = core
        self._cursor_id = cursor_id
        self._lock = lock
        self._commit_lock = threading.Lock()
        #: The messages delivered last, ``(reader, offset)``: processed once the next
        #: read (or a commit, or leaving the ``with`` block) says so.
        self._pending: list[tuple[PartitionReader, int]] = []
        self._done: dict[Key, int] = {}
        self._committed: dict[Key, int] = {}
        #: Partitions taken away whose processed position is still to be committed:
        #: ``key -> (offset, deadline)`` (see :meth:`release`).
        self._handoff: dict[Key, tuple[int, float]] = {}
        #: Set when :meth:`release` hands a position over: wakes the commit thread.
        self.handed_off = threading.Event()

    def delivered(self, batch: Iterable[tuple[PartitionReader, Message]]) -> None:
        """The messages the iterator handed out now. Call with the lock held."""
        self._pending = [(reader, msg.offset) for reader, msg in batch]

    def hand_over(self, old: PartitionReader, new: PartitionReader) -> None:
        """``old``'s deliveries not yet processed are ``new``'s from now (a failed
        reader restarted where it stopped): they count while ``new``'s partition stays
        this member's, and no longer once ``new`` is released. Call with the lock held.
        """
        self._pending = [(new if r is old else r, offset) for r, offset in self._pending]

    def mark_processed(self, assigned: Container[Key]) -> None:
        """The messages delivered last were processed: record their positions.

        ``assigned`` (the partitions assigned now) is asked with the lock held.
        """
        with self._lock:
            pending, self._pending = self._pending, []
            for reader, offset in pending:
                key = (reader.stream, reader.partition)
                # A partition taken away (or this member dropped) since: its position
                # is no longer this member's to commit, even when the partition has
                # come back by now (``released``). A failed reader never released is
                # being restarted on a partition still ours: absent from ``assigned``
                # only until its successor is in place.
                if reader.released or (key not in assigned and not reader.failed):
                    continue
                if offset > self._done.get(key, -1):
                    self._done[key] = offset

    def delivered_positions(self) -> dict[Key, int]:
        """The last offset delivered per partition. Call with the lock held."""
        delivered = dict(self._done)
        for reader, offset in self._pending:
            if reader.released:
                continue
            key = (reader.stream, reader.partition)
            delivered[key] = max(offset, delivered.get(key, -1))
        return delivered

    def committed(self) -> dict[Key, int]:
        """A copy of the committed positions."""
        with self._lock:
            return dict(self._committed)

    def commit(
        self, keys: Iterable[Key], allowed: Callable[[], bool] | None = None
    ) -> dict[Key, int]:
        """Commit the processed positions of ``keys``, read with the lock held (so the
        consumer's readers stand for the partitions assigned when the commit starts).

        Args:
            keys: The partitions to commit.
            allowed: Asked once the commit holds both locks, and before each cursor is
                stored: ``False`` stops the commit there (a commit may have waited for
                the locks while the member lost its standing).

        A partition taken away (or this member dropped) while the commit stores the
        cursors before it is skipped: its position is :meth:`hand_off`'s to commit now,
        or nobody's, and storing the one read at the start could move the cursor back
        under the commit on revoke, or under the partition's new owner.

        Each cursor is stored on its own: one that fails (its ``__cursors`` leader hung
        or unreachable) does not hold back those after it. The first failure takes the
        whole retry policy; from then on each cursor gets one attempt of at most
        ``rpc_timeout``, within ``max(max_delay, rpc_timeout)`` of that failure (past
        it the rest are not tried), so that a dead leader costs one policy per commit,
        not one per partition.

        Returns:
            The offsets stored by this call, per (stream, partition).

        Raises:
            CommitError: if some cursors could not be stored: ``failed`` names each with
                its error, ``committed`` holds those stored (recorded as committed).
        """
        with self._commit_lock:
            with self._lock:
                if allowed is not None and not allowed():
                    return {}
                wanted = set(keys)
                todo = {
                    k: self._done[k]
                    for k in wanted
                    if k in self._done and self._done[k] > self._committed.get(k, -1)
                }
            stored: dict[Key, int] = {}
            failed: dict[Key, LiftbridgeError] = {}
            attempts = _Attempts(self._core, self._cursor_id)
            for key, offset in sorted(todo.items()):
                if allowed is not None and (stored or failed) and not allowed():
                    break
                with self._lock:
                    if self._done.get(key, -1) < offset:
                        continue  # released meanwhile (see above)
                try:
                    attempts.store(key, offset)
                except LiftbridgeError as exc:
                    failed[key] = exc
                    continue
                with self._lock:
                    self._committed[key] = offset
                stored[key] = offset
            if failed:
                raise CommitError(failed=failed, committed=stored)
            return stored

    def store(self, key: Key, offset: int) -> None:
        """Store ``offset`` as ``key``'s cursor, where a partition without one starts
        (see :meth:`Readers._without_cursor`), and record it as committed.

        Raises:
            LiftbridgeError: if the cursor could not be stored.
        """
        cursors.set_cursor(self._core, self._cursor_id, key[0], key[1], offset)
        with self._lock:
            self._committed[key] = max(offset, self._committed.get(key, -1))

    def fetch(self, key: Key, abort: DialAbort | None = None) -> int:
        """The cursor stored for ``key`` (-1: none), recorded as committed; ``abort``
        ends the look-up's back-offs.

        Raises:
            LiftbridgeError: if the cursor could not be fetched (``ClientClosedError``
                once ``abort`` aborted).
        """
        stream, partition = key
        cursor = cursors.fetch_cursor(self._core, self._cursor_id, stream, partition, abort=abort)
        if cursor >= 0:
            with self._lock:
                # What is stored is committed: an older position of ours is not.
                self._committed[key] = max(cursor, self._committed.get(key, -1))
        return cursor

    def release(self, commit: Iterable[Key], forget: Iterable[Key], within: float) -> None:
        """Partitions taken away: hand the processed positions of ``commit`` not yet
        committed over to :meth:`hand_off` (for at most ``within`` seconds), then drop
        the positions of ``forget`` (see :meth:`forget`).

        Called on the heartbeat thread, which must not make the commit itself: a leader
        that hangs, or a :meth:`commit` holding the commit lock across one, would keep
        it from polling past the server's consumer timeout (the member dropped).
        """
        deadline = time.monotonic() + within
        with self._lock:
            for key in commit:
                offset = self._done.get(key, -1)
                if offset > self._committed.get(key, -1):
                    self._handoff[key] = (offset, deadline)
            for key in forget:
                self._done.pop(key, None)
                self._committed.pop(key, None)
            if self._handoff:
                self.handed_off.set()

    def reclaim(self, key: Key) -> None:
        """``key`` is assigned again: a handed-off position of it is no longer committed
        (the new reader starts from the cursor stored; storing an older position after
        its own commits would move the cursor back). Call with the lock held."""
        self._handoff.pop(key, None)

    def hand_off(self, allowed: Callable[[], bool]) -> dict[Key, int]:
        """Commit the positions :meth:`release` handed over (the commit thread).

        Those whose deadline passed are dropped with a WARNING: the partition's new owner
        has long started from the cursor as it was, and may have committed past the
        position since (it reads those messages again: at-least-once). Not the commit
        lock: the positions are of partitions no longer assigned, which no other commit
        stores, and a :meth:`commit` stuck on a hung leader must not hold them back.
        A cursor that cannot be stored is logged and the others are still tried, as
        :meth:`commit` tries them: after the first failure one attempt each, within
        ``max(max_delay, rpc_timeout)``; those left when that time is up are kept for
        the next call (within their deadline).

        Args:
            allowed: Asked before each cursor is stored: ``False`` keeps the positions
                not stored yet for the next call (within their deadline).

        Returns:
            The offsets stored by this call, per (stream, partition).
        """
        with self._lock:
            self.handed_off.clear()
            now = time.monotonic()
            late = sorted(k for k, (_, deadline) in self._handoff.items() if deadline <= now)
            for key in late:
                del self._handoff[key]
            todo = sorted(self._handoff)
        if late:
            _log.warning(
                "cursors %s: the positions of %s, taken away, were not committed in time; "
                "their new owner reads the messages after the stored cursors again",
                self._cursor_id,
                late,
            )
        stored: dict[Key, int] = {}
        attempts = _Attempts(self._core, self._cursor_id)
        for index, key in enumerate(todo):
            if attempts.spent():
                # A leader hung or down: one retry policy per partition would keep the
                # commit thread from the interval's commit for as many policies.
                _log.warning(
                    "cursors %s: commit on revoke of %s not tried now: its time after a "
                    "failure was up (tried again at the next auto-commit, within their "
                    "deadline, unless the consumer is closing)",
                    self._cursor_id,
                    todo[index:],
                )
                break
            if not allowed():
                break
            with self._lock:
                entry = self._handoff.pop(key, None)
            if entry is None:
                continue  # assigned again (reclaim) or cleared meanwhile
            offset, deadline = entry
            if time.monotonic() >= deadline:
                _log.warning(
                    "cursors %s: the position %d of %s/%d, taken away, was not committed "
                    "in time; its new owner reads the messages after the stored cursor again",
                    self._cursor_id,
                    offset,
                    *key,
                )
                continue
            try:
                attempts.store(key, offset)
            except LiftbridgeError as exc:
                _log.warning(
                    "cursors %s: commit of %s/%d on revoke failed: %s",
                    self._cursor_id,
                    *key,
                    exc,
                )
                continue
            stored[key] = offset
        return stored

    def forget(self, keys: Iterable[Key]) -> None:
        """Drop the positions of partitions no longer this member's.

        Their next owner moves the cursors on; should one come back, its reader starts
        from the cursor then stored, and an old position here must never be committed
        over it.
        """
        with self._lock:
            for key in keys:
                self._done.pop(key, None)
                self._committed.pop(key, None)

    def clear(self) -> None:
        """Drop every position (the server dropped this member), those handed off too.
        Call with the lock held."""
        self._pending = []
        self._handoff.clear()
        self._done.clear()
        self._committed.clear()
