"""What a partition read that failed, or stayed silent, means.

A broken read is resubscribed after the last delivered offset, ends the iteration
(a read-only partition read to its end, a range whose rest retention deleted, our own
cancel) or is raised, typed. :class:`ReadFailures` decides which;
:class:`~liftbridge_sync.subscription.partition.Subscription` delivers what the reads
bring. Thread-safe as :class:`~liftbridge_sync.subscription.partition.Subscription`
says.
"""

from __future__ import annotations

import logging
import time

from liftbridge_sync._runtime.scheduler import TimerHandle
from liftbridge_sync._transport import leader
from liftbridge_sync._transport.opening import SubscribeCall
from liftbridge_sync.errors import (
    ClientClosedError,
    LiftbridgeError,
    PartitionPausedError,
    ReadonlyPartitionError,
    WaitTimeoutError,
)
from liftbridge_sync.subscription.connection import PartitionConnection
from liftbridge_sync.subscription.lookup import ATTEMPT_AT_LEAST

__all__ = ["ReadFailures"]

_log = logging.getLogger("liftbridge_sync.subscription")


class ReadFailures:
    """What the failed and silent reads of a partition connection mean.

    Reads and writes the state of the :class:`PartitionConnection` it is given (the
    subscription holds both). Not thread-safe: the iterating thread's, as its reads are.
    """

    def __init__(self, conn: PartitionConnection) -> None:
        self._conn = conn
        #: The last offset a forward read may deliver (``None``: no stop offset).
        self.stop_offset = conn.target.stop_offset
        #: Seconds that reads have waited in vain since the last message (or the last
        #: idle cancel); the subscription zeroes it when a message arrives. Only time
        #: spent reading counts: while the caller is away, what the server sends waits
        #: in the socket, unread, and is no silence.
        self.idle_spent = 0.0
        #: When the read under way armed its idle cancel (``None``: none armed, or it
        #: fired and was dealt with).
        self._armed_at: float | None = None
        #: Whether the leader already said, after a silent call and with no message
        #: since, that the rest of the range is committed: a second silent call, a
        #: fresh one, ends the range (see ``_rest_is_gone``).
        self._seemed_gone = False
        #: Whether the WARNING about written but uncommitted offsets was given.
        self._told_uncommitted = False

    def heard(self) -> None:
        """A message arrived: the silence, and what it seemed to say, start afresh."""
        self.idle_spent = 0.0
        self._seemed_gone = False

    def arm_idle(self, call: SubscribeCall) -> TimerHandle:
        """Cancel ``call`` (a grpcio one, whose reads take no deadline) once reads got
        no message for ``rpc_timeout`` (see ``_rest_is_gone``).

        The reads' waits add up across ``get`` timeouts (see :meth:`end_read`) until a
        message arrives. (grpcio's own thread reads the socket meanwhile: a cancel does
        not take what came while the caller was away.)
        """
        window = self._conn.core.options.rpc_timeout
        handle = self._conn.arm(max(0.0, window - self.idle_spent), call)
        self._armed_at = time.monotonic()
        return handle

    def idle_deadline(self) -> float:
        """When a batched read that gets no message has been silent for ``rpc_timeout``
        (see ``_rest_is_gone``); possibly past already.

        Only the reads' own waits count (see :meth:`end_read`): a read whose window is
        spent still takes what the socket holds before its deadline passes (the h2
        call reads before it checks the deadline), so what came while the caller was
        away is delivered, not taken for silence.
        """
        now = time.monotonic()
        self._armed_at = now
        return now + self._conn.core.options.rpc_timeout - self.idle_spent

    def end_read(self) -> None:
        """Count the wait of the read under way (call it when the read ends, whatever
        its outcome)."""
        armed = self._armed_at
        if armed is not None:
            self._armed_at = None
            self.idle_spent += time.monotonic() - armed

    def on_silence(self, call: SubscribeCall, deadline: float | None) -> None:
        """A batched read passed its :meth:`idle_deadline` without a message: end the
        call, and the range if the rest is gone (``StopIteration``); returns if a
        resubscribe should follow (``deadline``: the read's)."""
        call.cancel()
        self._conn.forget(call)
        self._after_silence(deadline)

    def _after_silence(self, deadline: float | None) -> None:
        """A read ended by its silence (see ``_rest_is_gone``): the silence starts
        afresh, and the range ends (``StopIteration``) if the rest of it is gone."""
        self.idle_spent = 0.0
        self._armed_at = None
        if self._rest_is_gone(deadline):
            self._conn.done = self._conn.nothing_left = True
            raise StopIteration

    def _rest_is_gone(self, deadline: float | None) -> bool:
        """Whether a read with a stop offset has nothing left to wait for.

        v1.9.0 serves committed messages at once, but once retention has deleted every
        message (the active segment empty), its reader waits for the next message to be
        published, even for offsets long committed: a range that ends at or below the
        high watermark and got nothing for ``rpc_timeout`` from the leader has had the
        rest deleted. A follower's silence (``read_isr_replica``) proves nothing, as it
        may lag: the read goes on from the leader instead.

        One silent call is not enough: a server reader can also stall with the rest of
        the range stored (a probe saw a v1.9.0 broker go silent on a compacted stream
        being written, then crash: the range ended 316 messages short, blamed on
        retention). The first time the leader confirms, the read resubscribes after the
        last delivered offset, and only a fresh reader silent for ``rpc_timeout`` too
        ends the range. A stalled reader's rest comes at once on the fresh call;
        deleted messages cost a second ``rpc_timeout`` of waiting.

        The leader is asked once, within ``rpc_timeout`` and what is left before
        ``deadline`` (the ``get`` timeout's; at least ``ATTEMPT_AT_LEAST``): no retry
        policy holds the read. An answer not had is no answer: the read goes on waiting
        (and asks again after the next ``rpc_timeout`` of silence).
        """
        stop = self.stop_offset
        target = self._conn.target
        wait = self._conn.core.options.rpc_timeout
        if deadline is not None:
            wait = min(wait, max(deadline - time.monotonic(), ATTEMPT_AT_LEAST))
        try:
            info = leader.fetch_partition_metadata_once(
                self._conn.core, target.stream, target.partition, wait, abort=self._conn.abort
            )
        except LiftbridgeError:
            self._conn.stale = True  # the leader may have moved: the resubscribe looks again
            return False  # not known: go on waiting
        committed = info.high_watermark
        if stop is None or committed < stop:
            if stop is not None and info.newest_offset > committed:
                self._tell_uncommitted(committed, min(stop, info.newest_offset))
            return False  # the rest of the range is not written (or committed) yet
        if not self._conn.at_leader:
            # A follower (read_isr_replica) may lag the leader's high watermark for as
            # long as it stays in the ISR, longer than rpc_timeout: its silence says
            # nothing about deletion. Only the leader's own silence does.
            _log.info(
                "subscription %s/%d: the replica read is silent after offset %s although "
                "the leader has committed up to the stop (%d); reading from the leader",
                target.stream,
                target.partition,
                self._conn.last_offset,
                stop,
            )
            self._conn.leader_only = True
            return False
        if not self._seemed_gone:
            self._seemed_gone = True
            _log.info(
                "subscription %s/%d: the leader was silent after offset %s although it "
                "has committed up to the stop (%d); confirming on a fresh read",
                target.stream,
                target.partition,
                self._conn.last_offset,
                stop,
            )
            return False
        _log.warning(
            "subscription %s/%d: two reads in a row got nothing for %.1fs each after "
            "offset %s although every offset up to the stop (%d) is committed (high "
            "watermark %d): the rest was deleted (retention); ending",
            target.stream,
            target.partition,
            self._conn.core.options.rpc_timeout,
            self._conn.last_offset,
            stop,
            committed,
        )
        return True

    def _tell_uncommitted(self, committed: int, written: int) -> None:
        """Say once why a range read waits although the rest of its range is written.

        Silence for ``rpc_timeout`` with offsets written past the high watermark is not
        replication at work: a v1.9.0 leader recovers its high watermark at restart from
        a checkpoint up to 5 s old and serves nothing past it until the partition
        commits a new message. The read goes on waiting (the messages are stored, and
        come once anything is published to the partition), but not without a word.
        """
        if self._told_uncommitted:
            return
        self._told_uncommitted = True
        target = self._conn.target
        _log.warning(
            "subscription %s/%d: nothing arrived for %.1fs after offset %s although "
            "offsets up to %d are written; the leader has committed only up to %d and "
            "serves nothing past it until the partition commits a new message (a "
            "restarted v1.9.0 leader recovers an old high watermark); waiting",
            target.stream,
            target.partition,
            self._conn.core.options.rpc_timeout,
            self._conn.last_offset,
            written,
            committed,
        )

    def on_broken(
        self,
        call: SubscribeCall,
        exc: LiftbridgeError,
        timer: TimerHandle | None,
        idle: TimerHandle | None = None,
        deadline: float | None = None,
    ) -> None:
        """Decide what a failed read means; returns only if a resubscribe should follow
        (``deadline``: the read's, for what is decided on the way)."""
        self._conn.forget(call)
        if self._conn.closed.is_set():
            raise StopIteration
        code = exc.code
        if idle is not None and idle.fired and code == "CANCELLED":
            # Our own idle cancel: the next read resubscribes (a fresh server reader).
            self._after_silence(deadline)
            if timer is None or not timer.fired:
                return
        if timer is not None and timer.fired and code == "CANCELLED":
            # Our own cancel: the connection is fine, so the next read resubscribes
            # without asking for metadata, with a fresh resubscribe budget.
            raise WaitTimeoutError("no message arrived within the timeout")
        if isinstance(exc, ReadonlyPartitionError):
            # End of a read-only partition, or the stop position was delivered (only
            # those texts of RESOURCE_EXHAUSTED: any other is a failure, raised below).
            self._conn.done = self._conn.nothing_left = True
            raise StopIteration
        if self._conn.target.reverse and code == "UNKNOWN" and _is_eof(exc):
            self._conn.done = self._conn.nothing_left = True  # read down to the oldest message
            raise StopIteration
        if code == "CANCELLED":
            # A cancel we did not ask for, e.g. a get() timer that fired just as its
            # message arrived: quietly continue after the last offset. Counted as a
            # loss: a server (or a proxy) resetting every stream is called again after
            # the back-off, not in a tight loop.
            self._conn.lost += 1
            return
        # Already typed by the transport, as the end of a running subscription.
        error = exc
        # Paused under a read that asked to resume a paused partition: it goes on with
        # a resubscribe that asks again (resume=True), as the Go client's does. (v1.9.0
        # takes it without resuming; the read continues once anything resumes the
        # partition, a publish for one.)
        resuming = isinstance(error, PartitionPausedError) and self._conn.target.request.resume
        if resuming or code == "UNAVAILABLE" or error.retryable:
            _log.warning(
                "subscription %s/%d %s (%s); resubscribing after offset %s%s",
                self._conn.target.stream,
                self._conn.target.partition,
                "was paused under the read" if resuming else "lost its stream",
                error,
                self._conn.last_offset,
                " with resume=True: the read goes on once the partition is resumed"
                if resuming
                else "",
            )
            self._conn.broken_since = time.monotonic()
            self._conn.stale = True
            self._conn.lost += 1
            return
        self._conn.done = True
        if isinstance(error, PartitionPausedError):
            # Paused under a running read, the server says only "commit log was
            # closed": when metadata confirms the pause, say where the read stopped and
            # the way on, as for a partition paused before the subscribe.
            # One attempt's time for the question, as a resubscribe attempt's refusal
            # gets (one rpc_timeout in all, not one per broker): there is nothing to
            # wait out, the read ends either way. At least ATTEMPT_AT_LEAST past a get()
            # timeout nearly spent, or the answer is lost (each broker ~0.01 s).
            now = time.monotonic()
            asked = None if deadline is None else max(deadline, now + ATTEMPT_AT_LEAST)
            try:
                paused = self._conn.paused(asked, until=now)
            except ClientClosedError:
                if self._conn.closed.is_set():
                    raise StopIteration from None  # close() ended the look-up
                raise
            if paused is not None:
                raise PartitionPausedError(
                    f"{paused} (paused during this subscription, after offset "
                    f"{self._conn.last_offset}; the server said: {error})",
                    code=error.code,
                    details=error.details,
                ) from error
        raise error


def _is_eof(exc: LiftbridgeError) -> bool:
    return exc.details.strip().lower() == "eof"
