"""The pending table: every publish entered and not yet resolved, and the stream they go to.

Its state and the send lock are a :class:`~.pending_core.PendingCore` (a C struct with
the speedups, else its pure-Python twin). The send lock orders messages: entering a
publish (a sequence number, the table keyed by correlation id, the deadline queue of its
timeout) and handing its framed bytes to the live stream happen together under it, and
so does sending entries again.
Entries are resolved elsewhere (:mod:`.answers`, the owner loop): those pop them from
:attr:`PendingTable.entries` without the lock (one dict operation each, atomic), and the
entries they leave at the heads of the deadline queues are popped here, under the lock.
"""

from __future__ import annotations

import collections
import os
import random
import time
from collections.abc import Callable, Sequence

from liftbridge_sync._publishing.futures import settle
from liftbridge_sync._publishing.pending import (
    KICK,
    WAKE,
    Entry,
    FailureLedger,
    Outcome,
    failure,
    pop_answered,
)
from liftbridge_sync._publishing.pending_core import PendingCore, PendingCoreType
from liftbridge_sync._transport.publish_stream import PublishStream
from liftbridge_sync.errors import AckTimeoutError, ConfigurationError

__all__ = ["PendingTable"]


class PendingTable:
    """Publishes entered and not yet resolved, in send order, with their deadlines.

    Thread-safe: what changes the table's order or its stream runs under the send lock;
    entries are popped (resolved) by any thread without it.
    """

    __slots__ = (
        "_core",
        "_send_lock",
        "_pending",
        "_expiry",
        "_unsent_from",
        "_wake_owner",
        "_ledger",
    )

    def __init__(
        self,
        *,
        max_in_flight: int,
        max_message: int,
        wake_owner: Callable[[object], None],
        ledger: FailureLedger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: The state, the send lock and the limits: read and written by the C fast path
        #: (``submit_plain``) too, under the same lock. ``max_message`` is the largest
        #: framed request accepted (the gRPC prefix included).
        core = self._core = PendingCore(
            max_in_flight, max_message, f"{os.getpid():x}.{random.getrandbits(48):012x}.", clock
        )
        self._send_lock: PendingCoreType = core  # the core is the lock too
        #: By correlation id, in sequence order (insertion order; re-sends keep it).
        self._pending: dict[str, Entry] = core.pending
        #: A deque per timeout value, in send order: the earliest deadline at its head.
        self._expiry: dict[float, collections.deque[Entry]] = core.expiry
        self._wake_owner = wake_owner  # the owner loop's inbox
        self._ledger = ledger
        #: The sequence number from which publishes were never handed to a stream (they
        #: wait for the next one); ``None`` while a stream is live. Under the send lock.
        self._unsent_from: int | None = 1

    @property
    def core(self) -> PendingCoreType:
        """The state, for the C fast path (``submit_plain``) to enter publishes in."""
        return self._core

    # -- what anybody may read --------------------------------------------------------

    @property
    def entries(self) -> dict[str, Entry]:
        """The pending entries by correlation id, in sequence order. Resolving a publish
        pops its entry (any thread, without the lock); nothing else may change it."""
        return self._pending

    @property
    def live(self) -> PublishStream | None:
        """The stream publishes are written to, if one is open."""
        live: PublishStream | None = self._core.live
        return live

    @property
    def clock(self) -> Callable[[], float]:
        return self._core.clock

    @property
    def closing(self) -> bool:
        """Whether no more publishes are accepted."""
        return self._core.closing

    @property
    def finished(self) -> bool:
        """Whether what is pending is being failed for good (the publisher stopped)."""
        return self._core.finished

    @property
    def last_seq(self) -> int:
        """The sequence number of the last publish entered."""
        return self._core.seq

    @property
    def max_in_flight(self) -> int:
        return self._core.max_in_flight

    @property
    def max_message(self) -> int:
        return self._core.max_message

    @property
    def id_prefix(self) -> str:
        return self._core.id_prefix

    def __len__(self) -> int:
        return len(self._pending)

    def has_room(self) -> bool:
        """Whether a publish can be entered without waiting (or never will be: closing)."""
        core = self._core
        return len(self._pending) < core.max_in_flight or core.closing or core.finished

    def free_slots(self) -> int:
        """How many publishes can be entered now (every thread in line may go, to
        fail, once the publisher is closing)."""
        core = self._core
        if core.closing or core.finished:
            return core.max_in_flight
        return core.max_in_flight - len(self._pending)

    def set_in_line(self, count: int) -> None:
        """``count`` threads are in line for a free slot (:class:`~.waiting.Waiters`):
        while there are any, a publish not in line takes no slot (the C fast path,
        :meth:`admit`, :meth:`enter`), however many are free."""
        self._core.in_line = count

    def flushed(self, upto: int) -> bool:
        """Whether every publish up to sequence number ``upto`` is resolved."""
        while True:
            try:
                oldest = next(iter(self._pending.values()), None)
            except RuntimeError:  # changed by another thread meanwhile
                continue
            return oldest is None or oldest.seq > upto or self._core.finished

    def left(self, upto: int) -> int:
        """How many publishes up to sequence number ``upto`` are still pending."""
        return sum(1 for e in list(self._pending.values()) if e.seq <= upto)

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (prefix + counter: cheap and unique)."""
        core = self._core
        return f"{core.id_prefix}{core.next_id()}"

    def next_id_number(self) -> int:
        """The counter behind :meth:`next_correlation_id` (the caller adds the prefix)."""
        return self._core.next_id()

    # -- entering ----------------------------------------------------------------------

    def admit(self, entry: Entry, direct: bool = False) -> bool:
        """Enter a new publish and give it to the live stream, if that can be done now:
        a stream is open, there is room and the id is free. ``direct``: the caller waits
        for the ack next (the stream may let it write on its own thread)."""
        correlation_id = entry.correlation_id
        pending = self._pending
        core = self._core
        # acquire/release rather than ``with``: half the cost, on every publish.
        core.acquire()
        try:
            stream_: PublishStream | None = core.live
            if (
                stream_ is not None
                and len(pending) < core.max_in_flight
                and not core.in_line  # threads in line for a slot go first
                and not core.finished
                and correlation_id not in pending
            ):
                entry.seq = core.next_seq()
                pending[correlation_id] = entry
                timeout = entry.timeout
                expiry = self._expiry.get(timeout)
                if expiry is None:
                    expiry = self._expiry[timeout] = collections.deque()
                expiry.append(entry)
                wants_ack = entry.wants_ack
                stream_.send_framed(entry.framed, None if wants_ack else correlation_id, direct)
                if entry.deadline < core.sleep_until:
                    self._wake_owner(WAKE)
                return True
        finally:
            core.release()
        return False

    def enter(
        self,
        entries: Sequence[Entry],
        start: int,
        in_line: bool = False,
        limit: int | None = None,
    ) -> int:
        """Enter ``entries[start:]`` in order and send them, as many as there is room
        for; the index of the first one not entered (``start``: no room), or -1 once
        the publisher is closing (nothing entered: a call that waited for room when
        close() began was not accepted). Each one's deadline is its timeout from now:
        the ack timeout counts from when a publish is sent, not from when it was made
        (a large batch's entries take a while to build, and what waited for room was
        made long ago). ``in_line``: the caller's turn in the line for slots has come
        (:class:`~.waiting.Waiters`), and it enters at most ``limit`` (the slots not
        kept for those ahead of it); without it, nothing is entered while threads are
        in line (``start``)."""
        core = self._core
        with core:
            if core.closing or core.finished:
                return -1
            room = core.max_in_flight - len(self._pending)
            if limit is not None and limit < room:
                room = limit
            if room <= 0 or (core.in_line and not in_line):
                return start
            end = min(len(entries), start + room)
            self._enter_locked(entries, start, end, core.clock())
            return end

    def _enter_locked(self, entries: Sequence[Entry], start: int, end: int, now: float) -> None:
        pending = self._pending
        core = self._core
        stream: PublishStream | None = core.live
        earliest = float("inf")
        next_seq = core.next_seq
        expiry = self._expiry
        batch: list[bytes] = []  # acked requests, written together
        add_framed = batch.append
        # Entries of one call share a timeout: one deadline-queue lookup per change.
        queue_timeout: float | None = None
        queue_: collections.deque[Entry] = collections.deque()
        for i in range(start, end):
            entry = entries[i]
            correlation_id = entry.correlation_id
            if correlation_id in pending:
                error = ConfigurationError(f"correlation id {correlation_id!r} in use")
                settle((failure(entry, error),), self._ledger)
                continue
            entry.seq = next_seq()
            pending[correlation_id] = entry
            entry.deadline = now + entry.timeout
            if entry.timeout != queue_timeout:
                queue_timeout = entry.timeout
                found = expiry.get(queue_timeout)
                if found is None:
                    found = expiry[queue_timeout] = collections.deque()
                queue_ = found
            queue_.append(entry)
            if entry.deadline < earliest:
                earliest = entry.deadline
            if stream is not None:
                if entry.wants_ack:
                    add_framed(entry.framed)
                else:
                    # AckPolicy.NONE: the server never answers a success, so the publish
                    # is done once the transport has written it (a StreamSent event).
                    if batch:
                        stream.send_many(batch)
                        batch = []
                        add_framed = batch.append
                    stream.send_framed(entry.framed, correlation_id)
        if batch and stream is not None:
            stream.send_many(batch)
        if stream is None:
            self._wake_owner(KICK)
        elif earliest < core.sleep_until:
            self._wake_owner(WAKE)

    # -- the owner loop's side -------------------------------------------------------

    def wake_owner(self) -> None:
        """Wake the owner loop to look at the deadlines again (a publish is due earlier
        than it sleeps until)."""
        self._wake_owner(WAKE)

    def sleep_until(self, until: float) -> None:
        """The owner sleeps until ``until``: a publish due earlier wakes it."""
        self._core.sleep_until = until

    def expire(self, now: float) -> tuple[list[Outcome], float | None]:
        """Take out the publishes past their deadline: their failures, and the earliest
        deadline still to come."""
        pending = self._pending
        earliest: float | None = None
        timed_out: list[Outcome] = []
        # Under the send lock: the stream's thread also pops answered entries
        # (drop_answered), and two threads popping one deque could drop a live entry.
        with self._send_lock:
            for queue_ in self._expiry.values():
                while pop_answered(queue_, pending):
                    entry = queue_[0]
                    if entry.deadline <= now:
                        queue_.popleft()
                        if pending.pop(entry.correlation_id, None) is not entry:
                            continue  # the stream's thread resolved it just now
                        unsent_from = self._unsent_from
                        if unsent_from is not None and entry.seq >= unsent_from:
                            # No stream was open since it was entered: nothing stored it.
                            what = "not sent (no broker answered; never written)"
                        else:
                            what = "no ack" if entry.wants_ack else "not sent"
                        stream_name, partition = entry.partition_key()
                        error = AckTimeoutError(
                            f"{what} within {entry.timeout}s (stream {stream_name!r}, "
                            f"partition {partition}, correlation id {entry.correlation_id})"
                        )
                        timed_out.append(failure(entry, error))
                        continue
                    if earliest is None or entry.deadline < earliest:
                        earliest = entry.deadline
                    break
            if len(self._expiry) > 16:
                for key in [k for k, q in self._expiry.items() if not q]:
                    del self._expiry[key]
        return timed_out, earliest

    def drop_answered(self) -> None:
        """Pop answered publishes off the heads of the deadline queues.

        Called on the stream's thread after it resolved acks. Otherwise the queues keep
        every answered entry (with its future, ack and request bytes) until the owner
        next wakes, up to a second of traffic: objects that age into the garbage
        collector's oldest generation and make its full collections slow.
        """
        # Never wait for the lock: publishing threads take it for every message, and the
        # stream's thread would hold its I/O lock meanwhile, so nobody could write.
        # What is left now goes with the next batch of acks.
        if not self._send_lock.acquire(blocking=False):
            return
        try:
            for queue_ in self._expiry.values():
                pop_answered(queue_, self._pending)
        finally:
            self._send_lock.release()

    def go_live(self, stream: PublishStream, held: set[str], confirmed: bool) -> list[Entry]:
        """A new stream is open: send it every pending entry not in ``held`` (in order;
        those wait for a draining stream's answers) and write new publishes to it;
        ``confirmed``: it is known to have reached a broker. The entries sent."""
        core = self._core
        now = core.clock()
        with core:
            entries = list(self._pending.values())
            if held:
                entries = [e for e in entries if e.correlation_id not in held]
            for entry in entries:
                stream.send_framed(entry.framed, None if entry.wants_ack else entry.correlation_id)
                entry.resent_at = now
            if not core.finished:
                core.live = stream
                # An HTTP/2 stream's outbound queue: the C fast path queues on it.
                core.outbound = getattr(stream, "outbound", None)
                if confirmed:
                    self._unsent_from = None
        return entries

    def reached(self) -> None:
        """The first answer on the live stream, which could not tell it reached a broker
        (grpc): what it was sent was written (see :meth:`take_unsent`)."""
        if self._unsent_from is None:
            return
        with self._send_lock:
            if self._core.live is not None:
                self._unsent_from = None

    def go_offline(self) -> set[str]:
        """No stream to write to: later publishes wait unsent. The ids pending now."""
        with self._send_lock:
            self._offline_locked()
            return set(self._pending)

    def _offline_locked(self) -> None:
        core = self._core
        core.live = None
        core.outbound = None
        if self._unsent_from is None:
            self._unsent_from = core.seq + 1

    def take_unsent(self) -> list[Entry]:
        """Take out the publishes no stream was ever handed (since it went offline)."""
        with self._send_lock:
            first = self._unsent_from
            if first is None:
                return []
            # A snapshot first: settled entries leave the dict without the send lock.
            unsent = [e for e in list(self._pending.values()) if e.seq >= first]
            for entry in unsent:
                self._pending.pop(entry.correlation_id, None)
        return unsent

    def take_all(self) -> list[Entry]:
        """Take out every pending publish (to fail them)."""
        entries = list(self._pending.values())
        self._pending.clear()
        return entries

    def finish(self) -> None:
        """The publisher stops: nothing is entered or written any more."""
        with self._send_lock:
            self._core.finished = True
            self._offline_locked()

    def latest_deadline(self, now: float) -> float:
        """When the last publish pending times out (``now`` if none is later)."""
        latest = now
        with self._send_lock:  # the deadline queues change under it only
            for queue_ in self._expiry.values():
                for entry in queue_:
                    latest = max(latest, entry.deadline)
        return latest

    def clear_deadlines(self) -> None:
        self._expiry.clear()

    def close_admission(self) -> bool:
        """Accept no more publishes; whether that was so already."""
        core = self._core
        already = core.closing
        core.closing = True
        return already

    def send_again(self, pick: Callable[[], list[Entry]]) -> int:
        """Send again, in the order given, the pending entries ``pick`` chooses (called
        under the send lock); how many. None without a live stream: the next stream
        re-sends everything pending anyway."""
        core = self._core
        with core:
            stream: PublishStream | None = core.live
            if stream is None:
                return 0
            entries = pick()
            if entries:
                # AckPolicy.NONE: done once written, so the stream is told to say when
                # (a StreamSent event), as on the first send; without a note it would
                # fail with "not sent" at its deadline after going out.
                batch: list[bytes] = []
                for entry in entries:
                    if entry.wants_ack:
                        batch.append(entry.framed)
                        continue
                    if batch:
                        stream.send_many(batch)
                        batch = []
                    stream.send_framed(entry.framed, entry.correlation_id)
                if batch:
                    stream.send_many(batch)
                now = core.clock()
                for entry in entries:
                    entry.resent_at = now
        return len(entries)
