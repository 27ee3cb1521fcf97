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

This module is the :class:`Consumer` itself: arguments, lifecycle, iteration, and what
a rejoin renews; the parts it composes share its lock. The group RPCs and the heartbeat
poll are :mod:`._membership`'s; the reader thread per assigned partition, kept in line
with each polled assignment, is :mod:`._readers`'s; the delivered, processed and
committed positions and the commits are :mod:`._commits`'s; the queue between the
readers and the iterator is :mod:`._mailbox`'s. Thread-safe as :class:`Consumer` says.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Sequence

from liftbridge_sync._durations import check_seconds
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import wait_event
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.validate import (
    check_id,
    check_int,
    check_name,
    check_optional_text,
    check_timeout,
)
from liftbridge_sync.consumer._commits import Commits
from liftbridge_sync.consumer._mailbox import Mailbox, PartitionReader
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._readers import Readers
from liftbridge_sync.consumer._stats import ConsumerStats, Counters
from liftbridge_sync.errors import (
    ArgumentTypeError,
    ClientClosedError,
    ConfigurationError,
    ConsumerGroupNotFoundError,
    InternalThreadError,
    LiftbridgeError,
    NotGroupMemberError,
)
from liftbridge_sync.models import Message
from liftbridge_sync.positions import StartAt, StartKind

__all__ = ["CONSUMER_BUFFER", "Consumer", "group_cursor_id"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: Messages buffered between the partition readers and the iterating thread.
CONSUMER_BUFFER = 1024
_START_KINDS = (StartKind.EARLIEST, StartKind.LATEST, StartKind.NEW_ONLY)


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
        check_id("group", group)  # its cursors are keyed "__group:<group>,<stream>,..."
        if isinstance(streams, str | bytes) or not isinstance(streams, Iterable):
            raise ArgumentTypeError(
                f"'streams' must be a sequence of stream names, got {type(streams).__name__}"
            )
        self._streams = tuple(check_name("streams", s) for s in streams)
        if not self._streams:
            raise ConfigurationError("'streams' must be a non-empty sequence of stream names")
        check_optional_text("consumer_id", consumer_id)
        start = StartAt.new_only() if start is None else start
        if not isinstance(start, StartAt) or start.kind not in _START_KINDS:
            raise ConfigurationError(
                "'start' must be StartAt.earliest(), StartAt.latest() or StartAt.new_only(): "
                "where partitions without a committed cursor begin"
            )
        # None: manual commits only. inf is no interval (check_timeout would read it as
        # None, and nothing would be committed at all, not even on revoke or close).
        interval = (
            None
            if auto_commit is None
            else check_seconds("auto_commit", auto_commit, allow_zero=False, unlimited=False)
        )
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise ConfigurationError("'buffer' must be an int >= 1")
        if not isinstance(rejoin, bool):
            raise ConfigurationError("'rejoin' must be a bool")
        self._core = core
        self._group = group
        self._consumer_id = consumer_id or uuid.uuid4().hex
        #: A generated id is replaced on a rejoin; one the user chose is kept.
        self._generated_id = consumer_id is None
        self._rejoin = rejoin
        self._auto_commit = interval
        self._cursor_id = group_cursor_id(group)
        #: Shared with the collaborators below: guards their state and this object's.
        self._lock = threading.Lock()
        #: Set by close(): the readers and the commit thread end.
        self._stop = threading.Event()
        #: Set by close() once the final commit is made: the heartbeat ends. Polling
        #: goes on until then, or a close() that waited for a commit stuck on a hung
        #: cursor leader found the coordinator "silent" and withheld the final commit.
        self._stop_polling = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._closed = False
        #: The thread of the first close(), and set once it ended: a second close()
        #: waits for it.
        self._closer: threading.Thread | None = None
        self._close_done = threading.Event()
        self._mailbox = Mailbox(buffer)
        self._counters = Counters()
        self._membership = Membership(
            core, group, self._consumer_id, self._streams, self._lock, self._counters
        )
        self._commits = Commits(core, self._cursor_id, self._lock)
        self._readers = Readers(
            core,
            group,
            self._consumer_id,
            start,
            lock=self._lock,
            stop=self._stop,
            mailbox=self._mailbox,
            membership=self._membership,
            commits=self._commits,
            counters=self._counters,
            commit_on_revoke=interval is not None,
        )
        #: Set once a poll answer was applied, or on close or failure: what
        #: wait_for_assignment() waits for.
        self._settled = threading.Event()
        self._answered = False
        self._failure: BaseException | None = None
        self._threads: list[threading.Thread] = []
        #: An automatic commit was withheld and nothing was committed since (one log
        #: line per silence). Guarded by the lock.
        self._withholding = False
        #: Where __del__ puts this consumer back when it was dropped without close():
        #: the heartbeat thread, which holds it only weakly, closes it at its next
        #: turn, or Client.close() does first.
        self._dropped = Dropped()

    # ------------------------------------------------------------------ lifecycle

    def join(self) -> None:
        """Join the group and start the heartbeat (and auto-commit) threads.

        Raises:
            NoSuchStreamError: if a stream does not exist.
            ServerError: if the server refused the join (e.g. the id is already a member).
            InternalThreadError: if a thread could not be started (the process is out
                of threads; ``RuntimeError`` as ``__cause__``): the member left the
                group again and its threads were joined.

        Any other exception once the server may have applied the join (a
        ``KeyboardInterrupt`` while its answer is on its way, or while the threads
        start) also makes the member leave the group and join its threads before it
        propagates.
        """
        self._refuse_if_forked()
        try:
            self._membership.join()
        except LiftbridgeError:
            raise  # refused, or failed for good: no member to leave
        except BaseException:
            # A Ctrl-C while the answer was on its way: the server may have applied the
            # join, and the member would hold partitions nobody reads until the server's
            # consumer timeout (and its id be refused as "already a member").
            self.close()
            raise
        # The threads hold this consumer weakly: one dropped without close() is then
        # collected, and its __del__ hands it to the heartbeat thread to close.
        ref = weakref.ref(self)

        def reconcile(assignments: Iterable[api_pb2.PartitionAssignment], epoch: int) -> None:
            consumer = ref()
            if consumer is not None:
                consumer._reconcile(assignments, epoch)

        def fail(error: BaseException) -> None:
            consumer = ref()
            if consumer is not None:
                consumer._fail(error)

        def rejoin(error: BaseException) -> None:
            consumer = ref()
            if consumer is not None:
                consumer._rejoin_group(error)

        heartbeat = functools.partial(
            self._membership.heartbeat,
            self._stop_polling,
            reconcile,
            fail,
            rejoin if self._rejoin else None,
            self._dropped.tend,
        )
        try:
            self._heartbeat_thread = self._start_thread(
                f"liftbridge-consumer-{self._group}", heartbeat
            )
            self._dropped.watch(self._heartbeat_thread, self._close_bound())
            # Held weakly by the client as by the heartbeat thread strongly: once this
            # consumer was collected (the client's weak reference to it gone with it),
            # Client.close() still finds it there, and closes it and joins its threads.
            self._core.register(self._dropped)
            if self._auto_commit is not None:
                commit_loop = functools.partial(
                    _commit_loop, ref, self._stop, self._commits.handed_off, self._auto_commit
                )
                self._start_thread(f"liftbridge-consumer-commit-{self._group}", commit_loop)
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

    def _start_thread(self, name: str, target: object) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)  # only once started: close() joins it
        return thread

    @property
    def group(self) -> str:
        """The group id."""
        return self._group

    @property
    def consumer_id(self) -> str:
        """This member's id (generated unless given; a generated one changes on a rejoin)."""
        with self._lock:
            return self._consumer_id

    @property
    def _who(self) -> str:
        """``<group>/<member id>`` for log lines (two members of a group log side by side)."""
        return f"{self._group}/{self._consumer_id}"

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
        return self._closed

    def _refuse_if_forked(self) -> None:
        self._core.refuse_if_forked(f"consumer {self._group}/{self._consumer_id}")

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
                member and ``rejoin=False``.
            InternalThreadError: the heartbeat thread died (e.g. no thread could be
                started for a partition reader), with the original error as
                ``__cause__``.
            ForkedClientError: in a process forked after this consumer was created.
        """
        self._refuse_if_forked()
        seconds = check_timeout("timeout", timeout)
        # In slices: a Ctrl-C the kernel gave another thread is handled within one.
        if not wait_event(self._settled, seconds):
            raise TimeoutError("no assignment arrived within the timeout")
        with self._lock:
            answered, closed, failure = self._answered, self._closed, self._failure
        if closed:
            raise ClientClosedError(f"consumer {self._group} was closed")
        if not answered and failure is not None:
            raise failure
        return self.assignment()

    def stats(self) -> ConsumerStats:
        """A snapshot of this member's counters (see :class:`ConsumerStats`)."""
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
        hung leader) is left to end by itself, with a WARNING. In a forked child it
        only marks this object closed: the member and its threads are the parent's.
        """
        if self._core.forked:
            self._closed = True
            return
        with self._lock:
            first = not self._closed
            if first:
                self._closed = True
                self._closer = threading.current_thread()
                readers = self._readers.shut()
                failure = self._failure
        if not first:
            self._wait_for_close()
            return
        try:
            dropped = isinstance(failure, ConsumerGroupNotFoundError | NotGroupMemberError)
            self._close(readers, dropped)
        finally:
            self._close_done.set()

    def _wait_for_close(self) -> None:
        """A second close(): wait for the first to end, so that the member has left the
        group when this one returns too; at most as long as a first close() takes with
        every call it makes timing out (then a WARNING). Not on the thread of the first
        close() or on one of the threads it joins: that wait would hold it up."""
        current = threading.current_thread()
        if current is self._closer or current in self._threads:
            return
        bound = self._close_bound()
        if not self._close_done.wait(bound):
            _log.warning(
                "consumer %s: close() returns without waiting longer than %.1fs for "
                "another thread's close() to end",
                self._who,
                bound,
            )

    def _close_bound(self) -> float:
        """Seconds a close() takes at most, every call it makes timing out."""
        options = self._core.options
        policy = max(options.retry.max_delay, options.rpc_timeout)
        return options.rpc_timeout * 2 + 1.0 + policy * 2 + self._membership.consumer_timeout

    def _close(self, readers: list[PartitionReader], dropped: bool) -> None:
        """The first close(): ``readers`` are those shut out of the assignment."""
        self._stop.set()
        self._commits.handed_off.set()  # wakes the commit thread
        self._settled.set()
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
        current = threading.current_thread()
        heartbeat = self._heartbeat_thread
        for thread in self._threads:
            if thread is not current and thread is not heartbeat:
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    running.append(thread.name)
        running += self._readers.join_stopped(deadline)  # stopped by the heartbeat meanwhile
        # The heartbeat still polls: the member stays in the group (and may commit)
        # however long the wait above was.
        if self._auto_commit is not None and self._may_auto_commit("final commit"):
            self._commits.hand_off(self._membership.may_commit)  # partitions taken away
            try:
                self._commits.commit(
                    ((r.stream, r.partition) for r in readers),
                    allowed=self._membership.may_commit,
                )
            except LiftbridgeError as exc:
                _log.warning("consumer %s: final commit failed: %s", self._who, exc)
        self._stop_polling.set()
        if heartbeat is not None and heartbeat is not current:
            heartbeat.join(max(0.0, deadline - time.monotonic()))
            if heartbeat.is_alive():
                running.append(heartbeat.name)
        if running:
            _log.warning(
                "consumer %s: closing without waiting longer for %s, stuck in a call; they "
                "end by themselves once it returns",
                self._who,
                running,
            )
        if not dropped:  # a member the server dropped has no group to leave
            self._membership.leave()

    def __del__(self) -> None:
        # The collector may run this on any thread, one holding any lock (threading's
        # own among them): it takes none and starts no thread, it only puts this
        # consumer back where its heartbeat thread finds it (an atomic append). A
        # consumer that never started its threads, or was closed, has nothing to end.
        attrs = self.__dict__
        if attrs.get("_heartbeat_thread") is not None and not attrs.get("_closed", True):
            if not self._core.forked:  # the threads are the parent's
                self._dropped.put(self)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is None and not self._core.forked:
            self._commits.mark_processed(self._readers)
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"epoch={self._membership.epoch}"
        return f"<Consumer {self._group}/{self._consumer_id} {state}>"

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
        batch = self._mailbox.get_many(most, seconds)
        with self._lock:
            self._commits.delivered(batch)
            self._counters.delivered += len(batch)
        return [msg for _, msg in batch]

    def _fail(self, error: BaseException) -> None:
        """End the membership: the iterator and wait_for_assignment() raise ``error``.

        The readers stop, without committing, and what they delivered no longer
        counts: the server gave their partitions to others (or the group is gone), and
        the readers would otherwise read on (the server does not end a dropped member's
        streams), keep the error from ever being raised, and commit over the new
        owners' cursors."""
        with self._lock:
            self._failure = error
            readers = self._readers.drop_all(self._consumer_id)
            self._commits.clear()
        self._mailbox.fail(error)
        self._settled.set()
        for reader in readers:
            self._readers.stop(reader)

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
            ForkedClientError: in a process forked after this consumer was created.
        """
        self._refuse_if_forked()
        if self._closed:
            # Its readers are gone: returning {} would look like "nothing to commit".
            raise ClientClosedError(
                f"consumer {self._group} was closed: nothing was committed (with "
                "auto_commit=None, commit() before close())"
            )
        self._commits.mark_processed(self._readers)
        return self._commits.commit(self._readers)

    def committed(self) -> dict[tuple[str, int], int]:
        """The offsets this member committed, per (stream, partition)."""
        self._refuse_if_forked()
        return self._commits.committed()

    def read_positions(self) -> list[tuple[str, int, int | None, str]]:
        """Per assigned partition ``(stream, partition, last delivered, "consumer")``."""
        with self._lock:
            if self._closed:
                return []
            delivered = self._commits.delivered_positions()
            keys = sorted(self._readers)
        return [(stream, p, delivered.get((stream, p)), "consumer") for stream, p in keys]

    def _hand_off_once(self) -> None:
        """Commit the positions of the partitions taken away (see
        :meth:`Commits.hand_off`), unless this member may have been dropped."""
        if not self._may_auto_commit("commit on revoke"):
            return
        try:
            self._commits.hand_off(self._membership.may_commit)
        except Exception:
            # A bug: as in _auto_commit_once, said and the thread goes on.
            _log.exception("consumer %s: commit on revoke failed unexpectedly", self._who)

    def _auto_commit_once(self) -> None:
        """One auto-commit, unless this member may have been dropped (see
        :meth:`_may_auto_commit`)."""
        if not self._may_auto_commit("auto-commit"):
            return
        try:
            self._commits.commit(self._readers, allowed=self._membership.may_commit)
        except LiftbridgeError as exc:
            _log.warning("consumer %s: auto-commit failed: %s", self._who, exc)
        except Exception:
            # A bug: said with its traceback, and the next interval tries again (the
            # thread ending would stop every later auto-commit without a word).
            _log.exception("consumer %s: auto-commit failed unexpectedly", self._who)

    def _may_auto_commit(self, what: str) -> bool:
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
                self._who,
                what,
                "says this member does not exist"
                if self._membership.in_doubt
                else f"has not answered for {silent:.1f}s",
                self._membership.consumer_timeout,
            )
        return False

    # ------------------------------------------------------------------ assignments

    def _reconcile(self, assignments: Iterable[api_pb2.PartitionAssignment], epoch: int) -> None:
        """Apply a polled assignment (heartbeat thread); wait_for_assignment() may return."""
        if not self._readers.reconcile(assignments, epoch):
            return  # closed meanwhile
        with self._lock:
            self._answered = True
        self._settled.set()

    def _rejoin_group(self, error: BaseException) -> None:
        """The server dropped this member: stop reading, join again (heartbeat thread).

        The readers stop *without committing*: the partitions were given to other
        members, which may have moved the cursors on since, and a commit now could move
        a cursor back. The new membership resumes from the committed cursors.

        Raises:
            LiftbridgeError: if joining again failed for good (e.g. a stream is gone).
        """
        with self._lock:
            if self._closed:
                return
            old = self._consumer_id
            if self._generated_id:
                self._consumer_id = uuid.uuid4().hex
            new = self._consumer_id
            readers = self._readers.drop_all(new)
            self._commits.clear()
            self._counters.rejoins += 1
        _log.warning(
            "consumer %s: member %s was dropped by the server (%s); stopped %d partition "
            "reader(s) without committing, rejoining as %s from the committed positions",
            self._group,
            old,
            error,
            len(readers),
            new,
        )
        for reader in readers:
            self._readers.stop(reader)
        self._membership.rejoin(new, self._stop)


class Dropped:
    """Where a consumer dropped without close() waits to be closed.

    Its ``__del__`` puts it here (:meth:`put`: no lock, no thread); the heartbeat
    thread closes it before its next poll (:meth:`tend`), or ``Client.close()`` does
    first (:meth:`close`: the client holds this weakly, the heartbeat thread strongly).
    Otherwise the member would stay in its group, holding partitions nobody reads, and
    its threads outlive ``Client.close()`` by up to a heartbeat interval.

    Thread-safe: the consumer is taken out by one atomic ``popleft``; whoever takes it
    closes it.
    """

    close_accepts_timeout = False

    def __init__(self) -> None:
        self._queue: collections.deque[Consumer] = collections.deque()
        #: The consumer's heartbeat thread, and how long its close() may take.
        self._heartbeat: threading.Thread | None = None
        self._bound = 0.0
        #: Set once a consumer was taken out to be closed.
        self._taken = False

    def watch(self, heartbeat: threading.Thread, bound: float) -> None:
        """The heartbeat thread :meth:`close` joins while it closes a dropped consumer."""
        self._heartbeat, self._bound = heartbeat, bound

    def put(self, consumer: Consumer) -> None:
        """Hand over ``consumer``, collected without close() (its ``__del__``)."""
        self._queue.append(consumer)  # atomic: the collector may hold any lock

    def _take(self) -> Consumer | None:
        try:
            consumer = self._queue.popleft()
        except IndexError:
            return None
        self._taken = True
        _log.warning("consumer %s: dropped without close(): closing", consumer._who)
        return consumer

    def tend(self) -> None:
        """Close the consumer handed over, if any (the heartbeat thread, before a poll).

        Registered again first: the collector may have taken it off the client, whose
        close() then waits for this one instead of ending before it.
        """
        consumer = self._take()
        if consumer is None:
            return
        try:
            consumer._core.register(consumer)
        except ClientClosedError:
            return  # closed by register(), as by Client.close()
        consumer.close()

    def close(self) -> None:
        """``Client.close()``: close the consumer handed over and join its threads; if
        its heartbeat thread is closing it already, wait for that to end."""
        consumer = self._take()
        if consumer is not None:
            consumer.close()
            return
        heartbeat = self._heartbeat
        if self._taken and heartbeat is not None and heartbeat is not threading.current_thread():
            heartbeat.join(self._bound)


def _commit_loop(
    ref: weakref.ref[Consumer],
    stop: threading.Event,
    handed_off: threading.Event,
    interval: float | None,
) -> None:
    """The ``liftbridge-consumer-commit`` thread: the positions of partitions taken
    away as soon as the heartbeat hands them over, the others every interval. It holds
    the consumer only while it commits (see :meth:`Consumer.__del__`)."""
    assert interval is not None
    due = time.monotonic() + interval
    while True:
        handed_off.wait(max(0.0, due - time.monotonic()))
        consumer = ref()
        if stop.is_set() or consumer is None:
            return  # closed, or dropped: its heartbeat thread closes it
        # Cleared here too: a commit on revoke withheld waits for the interval.
        handed_off.clear()
        consumer._hand_off_once()
        if time.monotonic() >= due:
            consumer._auto_commit_once()
            due = time.monotonic() + interval
        del consumer
