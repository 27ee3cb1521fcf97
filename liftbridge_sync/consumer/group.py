"""A consumer-group member: join, heartbeat, follow assignments, commit cursors, leave.

The protocol (server ``groups.go``, go-liftbridge ``consumer.go``):

* ``JoinConsumerGroup`` (any broker) returns the group's coordinator, its epoch and the
  server's consumer and coordinator timeouts.
* A ``liftbridge-consumer-<group>`` thread polls ``FetchConsumerGroupAssignments`` on
  the coordinator every 0.4 × the consumer timeout (as the Go client does); the poll is
  the heartbeat. A coordinator that refuses (not the coordinator, stale epoch) or cannot
  be reached makes it ask the metadata leader for the current coordinator and epoch
  (``FetchMetadata`` only if that fails: it is slow while a broker is down); a
  coordinator that cannot be reached for the coordinator timeout is reported with
  ``ReportConsumerGroupCoordinator``, after which the metadata leader picks another.
* A member the server dropped joins again (see :class:`Consumer`).
* Each assigned partition is read by a ``liftbridge-consumer-<stream>-<partition>``
  thread with an ordinary resubscribing subscription carrying the group's ``Consumer``
  field; partitions taken away are stopped and their buffered messages dropped.
* Positions are cursors with go-liftbridge's id ``__group:<group>`` holding the last
  processed offset; a newly assigned partition starts at cursor + 1, or at the
  configured start position when it has no cursor.
* ``LeaveConsumerGroup`` on close.

This module is the :class:`Consumer` itself: its threads and lifecycle, iteration and
commits; the parts it composes share its lock. Its arguments are checked by
:mod:`._settings`; the group RPCs and the heartbeat poll are :mod:`._membership`'s (the
join call and the races around it :mod:`._joining`'s);
what each polled answer does (the assignment applied, a dropped member rejoining or
failing) is :mod:`._standing`'s; the reader thread per assigned partition is
:mod:`._readers`'s; the delivered, processed and committed positions and the commits
are :mod:`._commits`'s, the automatic commits and their thread :mod:`._autocommit`'s;
the queue between the readers and the iterator is :mod:`._mailbox`'s; its own threads
and their end are :mod:`._threads`'s, the steps of its close() :mod:`._closing`'s; a
consumer dropped without close() waits in :mod:`._dropped`. Thread-safe as :class:`Consumer`
says.
"""

from __future__ import annotations

import functools
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.validate import check_int, check_timeout
from liftbridge_sync.consumer._autocommit import AutoCommits
from liftbridge_sync.consumer._autocommit import commit_loop as _commit_loop
from liftbridge_sync.consumer._closing import Closing
from liftbridge_sync.consumer._commits import Commits
from liftbridge_sync.consumer._dropped import Dropped
from liftbridge_sync.consumer._mailbox import Mailbox, PartitionReader
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._readers import Readers
from liftbridge_sync.consumer._settings import Settings
from liftbridge_sync.consumer._standing import Standing
from liftbridge_sync.consumer._stats import ConsumerStats, Counters
from liftbridge_sync.consumer._threads import Threads
from liftbridge_sync.errors import (
    ClientClosedError,
    InternalThreadError,
    LiftbridgeError,
)
from liftbridge_sync.models import Message
from liftbridge_sync.positions import StartAt

__all__ = ["CONSUMER_BUFFER", "Consumer", "group_cursor_id"]

_P = ParamSpec("_P")

#: Messages buffered between the partition readers and the iterating thread.
CONSUMER_BUFFER = 1024


def group_cursor_id(group: str) -> str:
    """The cursor id under which a group's positions are stored (go-liftbridge's)."""
    return f"__group:{group}"


class Consumer:
    """A member of a consumer group: one iterator over the partitions assigned to it.

    Made by :meth:`Client.consumer`::

        with client.consumer("billing", streams=["orders"], auto_commit=5.0) as consumer:
            for msg in consumer:
                handle(msg)

    The server spreads the partitions of the group's streams over its members; when a
    member joins or leaves, partitions move. Delivery is **at-least-once**: a message is
    *processed* once the iterator is asked for the next message (or :meth:`commit` is
    called); committed positions are what a partition's next owner resumes after.
    With ``auto_commit=<seconds>`` processed positions are committed at that interval,
    when a partition is taken away (by the commit thread, within a consumer timeout,
    never on the heartbeat) and on close; with ``auto_commit=None`` only
    :meth:`commit` commits. Cursors use go-liftbridge's id ``__group:<group>``, so Go and
    Python members of one group continue each other's work.

    Partitions arrive with the first answer of the coordinator, a fraction of a second
    to a few seconds after :meth:`Client.consumer` returns; :meth:`wait_for_assignment`
    waits for it. :meth:`stats` counts rejoins, rebalance races, coordinator changes,
    reader restarts and delivered messages.

    A member the server dropped (it could not poll for longer than the server's
    consumer timeout, e.g. while the coordinator failed over) stops its readers
    *without committing* (its partitions may have moved on), joins again and resumes
    from the committed cursors; with ``rejoin=False`` the iterator raises
    :class:`ConsumerGroupNotFoundError` or :class:`NotGroupMemberError` instead. Before
    it knows, automatic commits already hold back once the coordinator has not answered
    for most of the consumer timeout (:attr:`ConsumerStats.commits_withheld`);
    :meth:`commit` always commits.

    Its threads hold it only weakly: a consumer dropped without :meth:`close` is
    collected, and its heartbeat thread then closes it at its next poll (within
    0.4 × the consumer timeout), with a WARNING, so that it leaves the group; a
    ``Client.close()`` before then closes it and joins its threads itself.

    Thread-safe: iterate from one thread; :meth:`commit` and :meth:`close` may be called
    from any thread.
    """

    close_accepts_timeout = False
    #: Closed after plain subscriptions (see ``ClientCore.close``): its close commits.
    close_rank = 1

    def __init__(
        self,
        core: ClientCore,
        group: str,
        streams: Sequence[str],
        *,
        consumer_id: str | None = None,
        start: StartAt | None = None,
        auto_commit: float | None,
        buffer: int = CONSUMER_BUFFER,
        rejoin: bool = True,
    ) -> None:
        settings = Settings.check(
            group,
            streams,
            consumer_id=consumer_id,
            start=start,
            auto_commit=auto_commit,
            buffer=buffer,
            rejoin=rejoin,
        )
        self._streams = settings.streams
        interval = settings.auto_commit
        self._core = core
        self._group = group
        self._rejoin = rejoin
        self._auto_commit = interval
        self._cursor_id = group_cursor_id(group)
        #: Shared with the collaborators below: guards their state and this object's.
        self._lock = threading.Lock()
        self._threads = Threads()
        self._stop = self._threads.stop
        self._mailbox = Mailbox(settings.buffer)
        #: Taken from the mailbox and not handed out yet (a read interrupted on the way:
        #: the next one hands them out first). The iterating thread's.
        self._hand: list[tuple[PartitionReader, Message]] = []
        self._counters = Counters()
        consumer_id = consumer_id or uuid.uuid4().hex
        self._membership = Membership(
            core, group, consumer_id, self._streams, self._lock, self._counters
        )
        self._commits = Commits(core, self._cursor_id, self._lock)
        self._readers = Readers(
            core,
            group,
            consumer_id,
            settings.start,
            lock=self._lock,
            stop=self._stop,
            mailbox=self._mailbox,
            membership=self._membership,
            commits=self._commits,
            counters=self._counters,
            commit_on_revoke=interval is not None,
        )
        self._standing = Standing(
            group,
            consumer_id,
            generated=settings.consumer_id is None,
            lock=self._lock,
            stop=self._stop,
            mailbox=self._mailbox,
            membership=self._membership,
            readers=self._readers,
            commits=self._commits,
            counters=self._counters,
        )
        self._autocommit = AutoCommits(
            lock=self._lock,
            membership=self._membership,
            commits=self._commits,
            readers=self._readers,
            counters=self._counters,
        )
        #: Where __del__ puts this consumer back when it was dropped without close():
        #: the heartbeat thread, which holds it only weakly, closes it at its next
        #: turn, or Client.close() does first.
        self._dropped = Dropped()
        self._closing = Closing(
            core,
            group,
            lock=self._lock,
            threads=self._threads,
            standing=self._standing,
            membership=self._membership,
            readers=self._readers,
            commits=self._commits,
            mailbox=self._mailbox,
            autocommit=self._autocommit,
            auto_commit=interval,
        )

    # ------------------------------------------------------------------ lifecycle

    def join(self) -> None:
        """Join the group and start the heartbeat (and auto-commit) threads.

        Raises:
            NoSuchStreamError: if a stream does not exist.
            ConsumerIdInUseError: if another member of the group has this id (a
                :class:`ServerError` too): no thread was started.
            ServerError: if the server refused the join otherwise.
            InternalThreadError: if a thread could not be started (the process is out
                of threads; ``RuntimeError`` as ``__cause__``): the member left the
                group again and its threads were joined.
            ClientClosedError: if this consumer was closed (it joins nothing again;
                ``Client.consumer`` makes a new one), also by another thread while it
                joined: that ``close()`` ends the join at once (its call and retries),
                and a join the server may have applied is left again.

        A join that fails after an attempt the server may have applied (its answer
        lost, its deadline expired) leaves the group before the error propagates; so
        does any other exception once the server may have applied the join (a
        ``KeyboardInterrupt`` while its answer is on its way, or while the threads
        start), which also joins the member's threads.
        """
        self._refuse_if_forked()
        if self._standing.closed:
            # Its threads were told to end for good: joined again, the member would hold
            # partitions nobody reads until the server's consumer timeout.
            raise ClientClosedError(
                f"consumer {self._who} was closed: it joins no group again (make a new one "
                "with Client.consumer)"
            )
        try:
            # Cut short by close() from another thread (stop_rejoining), as a rejoin is.
            self._membership.join_first()
        except ClientClosedError:
            if self._standing.closed:
                raise self._closed_meanwhile() from None
            raise
        except LiftbridgeError:
            # Refused, or failed for good; after an attempt the server may have applied
            # (a lost answer, a deadline), Membership.join left the group.
            raise
        except BaseException:
            # A Ctrl-C while the answer was on its way: the server may have applied the
            # join, and the member would hold partitions nobody reads until the server's
            # consumer timeout (and its id be refused as "already a member").
            self.close()
            raise
        # The threads hold this consumer weakly: one dropped without close() is then
        # collected, and its __del__ hands it to the heartbeat thread to close.
        ref = weakref.ref(self)
        heartbeat = functools.partial(
            self._membership.heartbeat,
            self._threads.stop_polling,
            _on_standing(ref, Standing.reconcile),
            _on_standing(ref, Standing.fail),
            _on_standing(ref, Standing.rejoin) if self._rejoin else None,
            self._dropped.tend,
        )
        try:
            # Under the lock close() marks the consumer closed under: a close() from
            # another thread either finds the threads started (and joins them) or is
            # seen here, before any starts.
            with self._lock:
                closed = self._standing.closed
                if not closed:
                    self._start_threads(ref, heartbeat)
        except BaseException as exc:
            # Nobody holds this consumer yet to close it: a heartbeat left running would
            # keep the member in the group, holding partitions, for the process's life.
            # Not only a thread that cannot start: a Ctrl-C between the two starts too.
            self.close()
            if not isinstance(exc, RuntimeError):
                raise
            error = InternalThreadError(
                f"consumer {self._who}: no thread could be started ({exc!r}); it left the group"
            )
            raise error from exc
        if closed:
            # Closed while the join's answer was on its way: close() leaves the group,
            # or already did, before this join was applied (then leave again).
            self._membership.leave_if_left()
            raise self._closed_meanwhile()

    def _closed_meanwhile(self) -> ClientClosedError:
        return ClientClosedError(
            f"consumer {self._who} was closed (by another thread) while it joined the group"
        )

    def _start_threads(self, ref: weakref.ref[Consumer], heartbeat: Callable[[], None]) -> None:
        """Start the heartbeat (and auto-commit) threads (under the consumer's lock).

        Raises:
            RuntimeError: if a thread could not be started.
        """
        thread = self._threads.start(
            f"liftbridge-consumer-{self._group}", heartbeat, heartbeat=True
        )
        self._dropped.watch(thread, self._closing.bound())
        # Held weakly by the client as by the heartbeat thread strongly: once this
        # consumer was collected (the client's weak reference to it gone with it),
        # Client.close() still finds it there, and closes it and joins its threads.
        self._core.register(self._dropped)
        if self._auto_commit is not None:
            commit_loop = functools.partial(
                _commit_loop,
                functools.partial(_auto_commits_of, ref),
                self._stop,
                self._commits.handed_off,
                self._auto_commit,
            )
            self._threads.start(f"liftbridge-consumer-commit-{self._group}", commit_loop)

    @property
    def group(self) -> str:
        """The group id."""
        return self._group

    @property
    def consumer_id(self) -> str:
        """This member's id (generated unless given; a generated one changes on a rejoin)."""
        with self._lock:
            return self._standing.consumer_id

    @property
    def _who(self) -> str:
        """``<group>/<member id>`` for log lines (two members of a group log side by side)."""
        return f"{self._group}/{self._standing.consumer_id}"

    @property
    def cursor_id(self) -> str:
        """The cursor id positions are committed under: ``__group:<group>``."""
        return self._cursor_id

    @property
    def epoch(self) -> int:
        """The group epoch of the current assignment."""
        return self._membership.epoch

    @property
    def coordinator(self) -> str:
        """Broker id of the group's coordinator, as last known."""
        return self._membership.coordinator

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._standing.closed

    def _refuse_if_forked(self) -> None:
        self._core.refuse_if_forked(f"consumer {self._group}/{self._standing.consumer_id}")

    def assignment(self) -> frozenset[tuple[str, int]]:
        """The (stream, partition) pairs currently assigned to and read by this member."""
        self._refuse_if_forked()
        with self._lock:
            return self._readers.reading()

    def wait_for_assignment(self, timeout: float | None) -> frozenset[tuple[str, int]]:
        """Wait until the coordinator's first answer was applied; the assignment then.

        Partitions arrive with the first poll of the coordinator, which follows the join
        by a fraction of a second to a few seconds. The assignment returned may be
        empty: when the group has more members than partitions, some members get none
        (they take over when another member leaves).

        Args:
            timeout: Seconds to wait (``None``: no limit).

        Returns:
            The (stream, partition) pairs assigned by that answer, as :meth:`assignment`.

        Raises:
            TimeoutError: if no answer was applied within ``timeout`` seconds.
            ClientClosedError: if the consumer was (or gets) closed.
            ConsumerGroupNotFoundError, NotGroupMemberError: the server dropped this
                member and ``rejoin=False`` (before the first answer or since).
            InternalThreadError: the heartbeat thread died (e.g. no thread could be
                started for a partition reader), with the original error as
                ``__cause__`` (before the first answer or since).
            ForkedClientError: in a process forked after this consumer was created.
        """
        self._refuse_if_forked()
        seconds = check_timeout("timeout", timeout)
        self._standing.wait(seconds)
        return self.assignment()

    def stats(self) -> ConsumerStats:
        """A snapshot of this member's counters (see :class:`ConsumerStats`).

        Raises:
            ForkedClientError: in a process forked after this consumer was created.
        """
        # Before the lock: a parent thread may have held it at fork (a hang for good).
        self._refuse_if_forked()
        with self._lock:
            return self._counters.snapshot()

    def close(self) -> None:
        """Stop reading, commit (with auto-commit), leave the group, join threads.

        With ``auto_commit=None`` nothing is committed here: what was processed but not
        committed is read again by the partition's next owner; call :meth:`commit`
        first (it raises :class:`~liftbridge_sync.errors.ClientClosedError` after
        ``close()``). Idempotent: a call while another thread's ``close()`` runs
        returns once that one has ended (the member has left the group), or after as
        long as a ``close()`` whose every call times out takes, with a WARNING. A
        blocked iteration ends with ``StopIteration`` as soon as it starts (before the
        threads are joined and the final commit is made). The threads get
        ``2 × rpc_timeout + 1`` seconds in all to end; one stuck in a call longer (a
        hung leader) is left to end by itself, with a WARNING. Interrupted (a
        ``KeyboardInterrupt``), it tells every thread to end without waiting, and may
        leave the member to the server's consumer timeout. In a forked child it only
        marks this object closed: the member and its threads are the parent's.
        """
        self._closing.close()

    def __del__(self) -> None:
        # The collector may run this on any thread, one holding any lock (threading's
        # own among them): it takes none and starts no thread, it only puts this
        # consumer back where its heartbeat thread finds it (an atomic append). A
        # consumer that never started its threads, or was closed, has nothing to end.
        attrs = self.__dict__
        standing, threads = attrs.get("_standing"), attrs.get("_threads")
        if (
            threads is not None
            and threads.heartbeat is not None
            and standing is not None
            and not standing.closed
        ):
            if not self._core.forked:  # the threads are the parent's
                self._dropped.put(self)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is None and not self._core.forked:
            self._commits.mark_processed(self._readers)
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._standing.closed else f"epoch={self._membership.epoch}"
        return f"<Consumer {self._group}/{self._standing.consumer_id} {state}>"

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        return self.get(None)

    def get(self, timeout: float | None = None) -> Message:
        """The next message of an assigned partition; the previous one counts as processed.

        Raises:
            TimeoutError: if none arrived within ``timeout`` seconds.
            StopIteration: once closed.
            ConsumerGroupNotFoundError, NotGroupMemberError: the server dropped this
                member.
            InternalThreadError: the heartbeat thread died (see
                :meth:`wait_for_assignment`).
            ForkedClientError: in a process forked after this consumer was created.
        """
        return self.get_many(1, timeout)[0]

    def get_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """The next messages of the assigned partitions, at least one and at most
        ``max_messages``; those of the previous read count as processed.

        Waits at most ``timeout`` seconds for the first message, as :meth:`get` does,
        then adds those already received, without waiting for more. The batch counts as
        processed at the next read, :meth:`commit`, or the end of a ``with`` block.

        Raises:
            ArgumentTypeError, ConfigurationError: ``max_messages`` is not an int >= 1.
            TimeoutError: if none arrived within ``timeout`` seconds.
            StopIteration: once closed.
            ConsumerGroupNotFoundError, NotGroupMemberError: the server dropped this
                member.
            InternalThreadError: the heartbeat thread died (see
                :meth:`wait_for_assignment`).
            ForkedClientError: in a process forked after this consumer was created.
        """
        self._refuse_if_forked()
        most = check_int("max_messages", max_messages, minimum=1)
        seconds = check_timeout("timeout", timeout)
        self._commits.mark_processed(self._readers)
        hand = self._hand
        if hand:  # left by an interrupted read (its drop perhaps unfinished)
            self._mailbox.drop(hand)
            hand = [item for item in hand if not item[0].stopped]  # no partition taken away
        if not hand or self._mailbox.closed:  # closed: the mailbox says the end
            self._hand = hand = self._mailbox.peek(most, seconds)
            self._mailbox.drop(hand)
        batch = hand[:most]
        messages = [msg for _, msg in batch]
        with self._lock:
            self._commits.delivered(batch)
            self._counters.delivered += len(batch)
        # Handed out by stores alone from here: no call a Ctrl-C could interrupt.
        self._hand = hand[most:]
        return messages

    # ------------------------------------------------------------------ commits

    def commit(self) -> dict[tuple[str, int], int]:
        """Commit the positions of every message delivered so far, the last one included.

        Only partitions still assigned to this member are committed: a partition that
        moved away may already have progressed under its new owner.

        Returns:
            The offsets stored by this call, per (stream, partition).

        Raises:
            ClientClosedError: after :meth:`close` (nothing is committed then: with
                ``auto_commit=None``, commit before closing).
            CommitError: if some cursors could not be stored (a ``__cursors`` leader
                hung or unreachable); the others were, each on its own. Its ``failed``
                names each partition with its error, its ``committed`` what was stored.
            ConsumerGroupNotFoundError, NotGroupMemberError, InternalThreadError: what
                ended the membership (as the iterator raises it): nothing was committed,
                the partitions are no longer this member's.
            ForkedClientError: in a process forked after this consumer was created.
        """
        self._refuse_if_forked()
        if self._standing.closed:
            # Its readers are gone: returning {} would look like "nothing to commit".
            raise ClientClosedError(
                f"consumer {self._group} was closed: nothing was committed (with "
                "auto_commit=None, commit() before close())"
            )
        failure = self._standing.failure
        if failure is not None:
            raise failure  # its readers were dropped: {} would look the same as above
        self._commits.mark_processed(self._readers)
        return self._commits.commit(self._readers)

    def committed(self) -> dict[tuple[str, int], int]:
        """The offsets this member committed, per (stream, partition)."""
        self._refuse_if_forked()
        return self._commits.committed()

    def read_positions(self) -> list[tuple[str, int, int | None, str]]:
        """Per assigned partition ``(stream, partition, last delivered, "consumer")``.

        Raises:
            ForkedClientError: in a process forked after this consumer was created.
        """
        # Before the lock: a parent thread may have held it at fork (a hang for good).
        self._refuse_if_forked()
        with self._lock:
            if self._standing.closed:
                return []
            delivered = self._commits.delivered_positions()
            keys = sorted(self._readers)
        return [(stream, p, delivered.get((stream, p)), "consumer") for stream, p in keys]


def _auto_commits_of(ref: weakref.ref[Consumer]) -> AutoCommits | None:
    """The commit thread's way to its consumer's automatic commits: ``None`` once the
    consumer was collected (its heartbeat thread, or Client.close(), closes it)."""
    consumer = ref()
    return None if consumer is None else consumer._autocommit


def _on_standing(
    ref: weakref.ref[Consumer], method: Callable[Concatenate[Standing, _P], None]
) -> Callable[_P, None]:
    """A heartbeat callback: ``method`` of the consumer's standing while the consumer
    lives (the heartbeat thread holds it weakly, see :meth:`Consumer.__del__`)."""

    def call(*args: _P.args, **kwargs: _P.kwargs) -> None:
        consumer = ref()
        if consumer is not None:
            method(consumer._standing, *args, **kwargs)

    return call
