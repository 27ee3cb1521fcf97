"""A consumer's partition readers, kept in line with the group's assignment.

Each assigned partition is read by a ``liftbridge-consumer-<stream>-<partition>`` thread
with an ordinary resubscribing subscription carrying the group's ``Consumer`` field,
from the partition's cursor + 1 (or the configured start position when it has no
cursor), into the consumer's :class:`~._mailbox.Mailbox`. :meth:`Readers.reconcile`
applies each assignment the heartbeat polls (:mod:`._membership`): it stops the readers
of partitions taken away (handing their positions to the commit thread with
auto-commit, see :mod:`._commits`) and starts those of partitions added.

Thread-safe as :class:`Readers` says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport import leader
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.consumer._commits import Commits, Key
from liftbridge_sync.consumer._mailbox import Mailbox, PartitionReader
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.errors import CoordinatorMismatchError
from liftbridge_sync.positions import StartAt, StartKind
from liftbridge_sync.subscription.opening import build_subscribe_request, cursor_in_range
from liftbridge_sync.subscription.partition import Subscription, SubscriptionTarget

__all__ = ["Readers"]

_log = logging.getLogger("liftbridge_sync.consumer")


class Readers:
    """One member's partition readers, one per assigned partition.

    Made and driven by the consumer: :meth:`reconcile` on the heartbeat thread,
    :meth:`shut` and :meth:`drop_all` when the consumer closes or was dropped.

    Thread-safe: the readers, the member id they subscribe as and whether they were
    shut are guarded by ``lock``, the lock the consumer shares with its collaborators;
    the methods that say so must be called with it held, the others take it.
    """

    def __init__(
        self,
        core: ClientCore,
        group: str,
        consumer_id: str,
        start: StartAt,
        *,
        lock: threading.Lock,
        stop: threading.Event,
        mailbox: Mailbox,
        membership: Membership,
        commits: Commits,
        counters: Counters,
        commit_on_revoke: bool,
    ) -> None:
        self._core = core
        self._group = group
        self._consumer_id = consumer_id
        self._start = start
        self._lock = lock
        #: The consumer's: set when it closes.
        self._stop = stop
        self._mailbox = mailbox
        self._membership = membership
        self._commits = commits
        self._counters = counters
        self._commit_on_revoke = commit_on_revoke
        self._readers: dict[Key, PartitionReader] = {}
        #: The threads of readers stopped and maybe not ended yet (see :meth:`stop`):
        #: joined when the consumer closes.
        self._stopping: list[threading.Thread] = []
        #: Set once the consumer closes (under the lock, as it marks itself closed): no
        #: reader starts any more.
        self._shut = False
        #: The readers :meth:`shut` took out of the assignment.
        self._shut_out: list[PartitionReader] = []

    @property
    def _who(self) -> str:
        """``<group>/<member id>`` for log lines (two members of a group log side by side)."""
        return f"{self._group}/{self._consumer_id}"

    # ------------------------------------------------------------------ under the lock

    def __iter__(self) -> Iterator[Key]:
        """The partitions assigned now. Call with the lock held."""
        return iter(self._readers)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is assigned now. Call with the lock held."""
        return key in self._readers

    def reading(self) -> frozenset[Key]:
        """The partitions assigned and being read. Call with the lock held."""
        return frozenset(k for k, r in self._readers.items() if not (r.stopped or r.failed))

    def shut(self) -> list[PartitionReader]:
        """The consumer closes: no reader starts any more; the readers to stop (those
        of an earlier call included: a close() interrupted stops them all again).

        They are marked stopped at once, in the caller's critical section: the iterator
        hands out none of their queued messages while they are stopped one by one (what
        it would hand out now could never count as processed). Call with the lock held.
        """
        self._shut = True
        for reader in self._readers.values():
            reader.stopped = True
        self._shut_out.extend(self._readers.values())
        self._readers.clear()
        return list(self._shut_out)

    def drop_all(self, consumer_id: str) -> list[PartitionReader]:
        """The server dropped this member: the readers to stop (without committing).

        They are marked stopped and released at once, in the caller's critical section:
        the iterator hands out none of their queued messages from now, and what they
        delivered before never counts as processed. Readers subscribe as
        ``consumer_id`` from now. Call with the lock held.
        """
        readers = list(self._readers.values())
        for reader in readers:
            reader.stopped = reader.released = True
        self._readers.clear()
        self._consumer_id = consumer_id
        return readers

    # ------------------------------------------------------------------ assignments

    def reconcile(self, assignments: Iterable[api_pb2.PartitionAssignment], epoch: int) -> bool:
        """Apply a polled assignment: stop the readers of partitions taken away (and
        of failed ones), start those of partitions added (heartbeat thread).

        Returns:
            ``False`` if the readers were shut meanwhile (the assignment was not
            applied in full), ``True`` otherwise.
        """
        wanted = {(a.stream, int(p)) for a in assignments for p in a.partitions}
        with self._lock:
            if self._shut:
                return False
            self._membership.epoch = epoch
            revoked = [r for k, r in self._readers.items() if k not in wanted or r.failed]
            # Released already (it lost a race to a newer epoch): nothing of it is ours
            # to commit any more.
            lost = [r for r in revoked if r.released]
            for reader in revoked:
                key = (reader.stream, reader.partition)
                del self._readers[key]
                # Taken away: its deliveries are no longer ours, and neither are its
                # queued messages (its new owner reads them from the cursor): stopped
                # here, in this critical section, the iterator hands out none of them,
                # while the readers are stopped one by one below. A failed reader of a
                # partition still ours is only restarted: what it delivered still counts.
                if key not in wanted:
                    reader.released = reader.stopped = True
            added = sorted(k for k in wanted if k not in self._readers)
            self._counters.reader_restarts += sum(
                1 for r in revoked if (r.stream, r.partition) in wanted
            )
        # A failed reader of a partition still ours (never released) is restarted where
        # it stopped: its queued messages are handed over to the new reader, which reads
        # on after them. Starting from the cursor would drop them, and with no cursor the
        # start position (new-only) would skip them and all that came meanwhile.
        failed: dict[Key, PartitionReader] = {}
        for reader in revoked:
            if reader.released:
                self.stop(reader)
            else:
                self._join(reader)  # its thread ends by itself
                failed[(reader.stream, reader.partition)] = reader
        if revoked:
            _log.info(
                "consumer %s: epoch %d: stopped %s",
                self._who,
                epoch,
                [(r.stream, r.partition) for r in revoked],
            )
            # Their processed positions are committed by the commit thread, at once and
            # within a consumer timeout: a commit here, on the heartbeat thread, could
            # keep it from polling past the consumer timeout (a hung leader, or a
            # commit() holding the commit lock across one), and the member is dropped.
            moved = [r for r in revoked if (r.stream, r.partition) not in wanted]
            self._commits.release(
                ((r.stream, r.partition) for r in moved if r not in lost)
                if self._commit_on_revoke
                else (),
                [(r.stream, r.partition) for r in revoked if r in lost or r in moved],
                self._membership.consumer_timeout,
            )
        for stream, partition in added:
            reader = PartitionReader(stream, partition, epoch)
            old = failed.get((stream, partition))
            if old is not None:
                last = old.sub.last_offset if old.sub is not None else None
                reader.resume_after = old.resume_after if last is None else last
                # The end the assignment's first reader pinned: one looked up again now
                # would skip what was published while the partition went unread.
                reader.pinned = old.pinned
            with self._lock:
                if self._shut:
                    return False
                self._readers[(stream, partition)] = reader
                self._commits.reclaim((stream, partition))
                if old is not None:
                    self._mailbox.hand_over(old, reader)
                    self._commits.hand_over(old, reader)
                    old.stopped = True
                # Started under the lock, and known only once started: close() lists
                # the readers under it too, and must never find one whose thread exists
                # but has not started (joining it would raise). One that cannot start
                # (out of threads) ends the heartbeat, and the membership with it.
                thread = threading.Thread(
                    target=self._read,
                    args=(reader,),
                    name=f"liftbridge-consumer-{stream}-{partition}",
                    daemon=True,
                )
                thread.start()
                reader.thread = thread
        if added:
            _log.info("consumer %s: epoch %d: reading %s", self._who, epoch, added)
        return True

    def stop(self, reader: PartitionReader) -> None:
        """Stop ``reader``: close its subscription, drop its queued messages.

        Its thread is not waited for: it ends by itself at once, or, inside a call it
        cannot leave (a cursor fetch from a hung leader: up to ``rpc_timeout`` per
        attempt), once that call returns, without reading on. The heartbeat thread
        stops readers, and waiting there would keep it from polling for longer than
        the server's consumer timeout: the member would be dropped. :meth:`stop_all`
        (the consumer closing) joins every thread stopped so far.
        """
        with self._lock:
            reader.stopped = True
            sub = reader.sub
            thread = reader.thread
            if thread is not None:
                self._stopping = [t for t in self._stopping if t.is_alive()]
                self._stopping.append(thread)
        if sub is not None:
            sub.close()
        self._mailbox.wake()

    def _join(self, reader: PartitionReader) -> None:
        """Wait for ``reader``'s thread to end (a failed one ends by itself)."""
        thread = reader.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._core.options.rpc_timeout * 2 + 1.0)

    def stop_all(self, readers: Sequence[PartitionReader], deadline: float) -> list[str]:
        """Stop ``readers`` (the consumer closes), then wait for their threads and for
        those of the readers stopped before (see :meth:`join_stopped`)."""
        for reader in readers:
            self.stop(reader)
        return self.join_stopped(deadline)

    def join_stopped(self, deadline: float) -> list[str]:
        """Wait for the threads of the readers stopped so far (the consumer closes),
        all of them until ``deadline`` (``time.monotonic()``) at most: one each would
        make a close with many readers stuck in a call (a hung leader) last that many
        times as long.

        Returns:
            The names of the threads still running at the deadline (they end by
            themselves once their call returns).
        """
        with self._lock:
            threads, self._stopping = self._stopping, []
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in threads if t is not current and t.is_alive()]

    # ------------------------------------------------------------------ reader threads

    def _start_position(self, reader: PartitionReader) -> StartAt:
        """Where ``reader`` starts: after its failed predecessor's last message, else
        at the partition's cursor + 1, else at the start position (see
        :meth:`_without_cursor`).

        Raises:
            LiftbridgeError: a look-up failed (the reader fails, and is restarted at
                the next poll with the position pinned so far).

        Thread-safe: called on the reader's own thread; what it shares is read and
        set with the lock held.
        """
        if reader.resume_after is not None:
            return StartAt.offset(reader.resume_after + 1)
        stream, partition = reader.stream, reader.partition
        # Pinned before the cursor fetch: that fetch fails right after a server restart
        # (no __cursors yet), and an end looked up only at the next poll skipped what was
        # published meanwhile, for good once auto-commit stored that end as the cursor.
        pinned = self._pin(reader)
        # Closing ends the look-ups below at once: their back-offs (up to the retry
        # policy's maximum) outlasted close()'s bound for the reader threads.
        closing = self._membership.closing
        cursor = self._commits.fetch((stream, partition), closing)
        if cursor < 0:
            return self._without_cursor(reader, pinned)
        # A cursor is only ever committed for a message delivered, so the log reaches
        # it, on any leader since (each comes from the ISR): past the log's end, the
        # stream was created again (see cursor_in_range).
        if cursor_in_range(
            self._core,
            stream,
            partition,
            cursor,
            named="",
            instead=f"the start position (consumer {self._who})",
            log=_log,
            abort=closing,
        ):
            return StartAt.offset(cursor + 1)
        return self._without_cursor(reader, pinned)

    def _pin(self, reader: PartitionReader) -> int | None:
        """The offset a start at the partition's end (new-only, latest) reads from in
        this assignment: looked up by its first reader, then kept (``reader.pinned``,
        handed on to the readers restarted after a failure).

        An empty partition is read from offset 0, the end it was found at. A paused
        partition has no leader to ask: the cluster metadata's offsets are its end as
        long as it stays paused (only a publish resumes it, and appends after them),
        but a broker without a copy of it reports -1 there, which tells nothing (reading
        from 0 would hand out the whole partition): it is looked up again by the next
        reader. Other start positions are not pinned (``None``): the server evaluates
        them, and they do not move on as messages come.

        Raises:
            LiftbridgeError: the partition's metadata could not be fetched.

        Thread-safe: ``reader.pinned`` is read and set with the lock held.
        """
        kind = self._start.kind
        if kind not in (StartKind.NEW_ONLY, StartKind.LATEST):
            return None
        with self._lock:
            if reader.pinned is not None:
                return reader.pinned
        meta = leader.fetch_partition_metadata(
            self._core, reader.stream, reader.partition, abort=self._membership.closing
        )
        if meta.paused and meta.newest_offset < 0:
            return None
        newest = meta.newest_offset
        pinned = newest + 1 if kind is StartKind.NEW_ONLY else max(newest, 0)
        with self._lock:
            reader.pinned = pinned
        return pinned

    def _without_cursor(self, reader: PartitionReader, pinned: int | None) -> StartAt:
        """Where a partition without a usable cursor starts: ``pinned`` (see
        :meth:`_pin`) if given, else the start position; with auto-commit, the offset
        before ``pinned`` becomes its cursor.

        Its next owner would otherwise find no cursor either, should the partition move
        before anything of it was committed (group members joining one after the other,
        or this one closing without having read it), and start at the end as it was
        *then*: what came in between would be read by no member. Stored at once, the
        cursor makes it start where this reader did. An empty partition has no offset
        to store (a cursor of -1 reads as none): it is read from offset 0, the end it
        was found at (the start position, evaluated by the server at the subscribe,
        would skip what was published meanwhile, and nothing else would read it). With
        ``auto_commit=None`` nothing is stored but what :meth:`Consumer.commit` stores.

        Raises:
            LiftbridgeError: the cursor could not be stored (the reader fails, and the
                one restarted at the next poll stores it from the same ``pinned``).

        Thread-safe: ``reader.stopped`` is read with the lock held.
        """
        if pinned is None:
            return self._start
        before = pinned - 1
        if before < 0 or not self._commit_on_revoke or not self._membership.may_commit():
            return StartAt.offset(pinned)
        with self._lock:
            # Taken away while the end was looked up (a slow leader): the new owner may
            # have committed past it since, and storing it would move the cursor back.
            stopped = reader.stopped
        if not stopped:
            self._commits.store((reader.stream, reader.partition), before)
        return StartAt.offset(pinned)

    def _read(self, reader: PartitionReader) -> None:
        """Reader thread: subscribe as a group member and feed the mailbox."""
        core, stream, partition = self._core, reader.stream, reader.partition
        with self._lock:
            consumer_id = self._consumer_id
        try:
            request = build_subscribe_request(
                core,
                stream,
                partition,
                self._start_position(reader),
                None,
                read_isr_replica=False,
                resume=False,
                reverse=False,
            )
            assert request is not None  # no stop position: never empty
            request.consumer.CopyFrom(
                api_pb2.Consumer(
                    groupId=self._group, groupEpoch=reader.epoch, consumerId=consumer_id
                )
            )
            target = SubscriptionTarget(
                stream=stream,
                partition=partition,
                request=request,
                read_isr_replica=False,
                reverse=False,
            )
            sub = Subscription(core, target)
            with self._lock:
                if reader.stopped:
                    return
                reader.sub = sub
            sub.open(empty=False)
            for msg in sub:
                if not self._mailbox.put(reader, msg):
                    break
            else:
                if sub.exhausted:
                    # A read-only partition read to its end: no other member took it,
                    # what the reader delivered still counts and its queued messages
                    # still go out; nothing more will come, so it is not restarted.
                    _log.info(
                        "consumer %s: %s/%d is read-only and was read to its end",
                        self._who,
                        stream,
                        partition,
                    )
                    return
                # The server ends a group member's stream with OK when another member
                # subscribes to the partition with a newer epoch: a rebalance race.
                self._lost_race(reader, "the server ended the stream")
        except CoordinatorMismatchError as exc:
            # "Consumer is not currently assigned this partition": another member holds
            # it at a newer epoch. Expected around every rebalance; the next poll says
            # whether the partition is still ours (then the reader starts again).
            self._lost_race(reader, str(exc))
        except Exception as exc:
            if reader.stopped or self._stop.is_set():
                return
            _log.warning(
                "consumer %s: reading %s/%d failed (%s); retrying at the next poll",
                self._who,
                stream,
                partition,
                exc,
            )
            with self._lock:
                reader.failed = True
        finally:
            sub_ = reader.sub
            if sub_ is not None:
                sub_.close()

    def _lost_race(self, reader: PartitionReader, why: str) -> None:
        """Another member read the partition at a newer epoch: what this reader
        delivered may have been processed and committed past by it meanwhile, so it no
        longer counts (nor do its queued messages go out), and the positions of the
        partition are dropped: a commit before the next poll would move the cursor
        back. A new reader, should the partition still be ours, starts from the cursor
        then stored."""
        with self._lock:
            if reader.stopped or self._stop.is_set():
                return
            reader.failed = reader.stopped = reader.released = True
            self._counters.expected_races += 1
        self._mailbox.wake()
        self._commits.forget([(reader.stream, reader.partition)])
        _log.debug(
            "consumer %s: %s/%d read at epoch %d ended (%s): another member reads it "
            "at a newer epoch; the next poll decides",
            self._who,
            reader.stream,
            reader.partition,
            reader.epoch,
            why,
        )
