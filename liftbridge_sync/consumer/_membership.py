"""A consumer's membership of its group: join, the heartbeat's calls, coordinator
failover, leave.

The protocol is described in :mod:`liftbridge_sync.consumer.group`. :class:`Membership`
makes the group RPCs and keeps what they answer (coordinator, epoch, the server's
timeouts); the join call and the races around it are :mod:`._joining`'s, the calls that
find the coordinator :mod:`._coordinator`'s, the heartbeat loop that polls and acts on
each answer :mod:`._heartbeat`'s; what to do with an assignment is the consumer's,
handed in as a callback.

Thread-safe: the coordinator and epoch are guarded by the lock shared with the consumer;
the timeouts are written by :meth:`Membership.join` before the heartbeat thread starts;
the coordinator lookup (remembered addresses, silences) is the heartbeat thread's alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync.consumer._coordinator import CoordinatorLookup
from liftbridge_sync.consumer._heartbeat import RETRY_WAIT, Fail, Heartbeat, Reconcile, Rejoin
from liftbridge_sync.consumer._joining import join_group
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    ConsumerGroupNotFoundError,
    ConsumerIdInUseError,
    DeadlineExceededError,
    LiftbridgeError,
    NotGroupMemberError,
    NotLeaderError,
    ServerError,
)

__all__ = ["Membership"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: go-liftbridge's heartbeat: this fraction of the server's consumer timeout.
_HEARTBEAT_FRACTION = 0.4
#: Wait before joining again after a failed rejoin (as before polling again).
_RETRY_WAIT = RETRY_WAIT
#: Each attempt of a heartbeat call (the poll, asking for and reporting the coordinator)
#: is bounded by this fraction of the server's consumer timeout (and by rpc_timeout).
#: The coordinator expires a member it has not heard from for one consumer timeout; a
#: call that waits longer, e.g. a broker holding the call until a new metadata leader is
#: elected (v1.9.0 waits up to the call's deadline; 10 s were seen), makes the member miss
#: the new coordinator. Poll interval (0.4) + one stalled call (0.25) + the retry wait
#: stay within the timeout.
_CALL_FRACTION = 0.25
#: A member commits only while its coordinator answered within this fraction of the
#: consumer timeout. The server drops a member that has not polled for the timeout and
#: gives its partitions to others, and cursors carry no epoch: a commit by a member
#: that may have been dropped could move a cursor another member is reading from. A
#: healthy member hears back every 0.4 of the timeout (plus the call); the rest leaves
#: room for the commit's own calls to land before the server could drop it.
_COMMIT_FRACTION = 0.75
#: A member leaves its group only while its coordinator answered within this fraction of
#: the consumer timeout, and the leave call must end by then. v1.9.0 crashes (a nil
#: dereference in consumerExpired, groups.go) when a member leaves while the server is
#: expiring it: the expiry fails to remove a member that is gone and then writes to it.
#: The member's timer was reset at most _CALL_FRACTION before the coordinator's answer,
#: so it fires no sooner than 0.75 of the timeout after it: 0.5 leaves a quarter of the
#: timeout for the leave to be applied. Later, the member asks once more first (which
#: resets the timer) or, if that fails, leaves the group to the server's timeout.
_LEAVE_FRACTION = 0.5


class Membership:
    """One member's standing in a consumer group, as the group RPCs report it.

    Thread-safe: ``coordinator``, ``epoch``, the member id and ``counters`` are read and
    written under ``lock``.
    """

    def __init__(
        self,
        core: ClientCore,
        group: str,
        consumer_id: str,
        streams: Sequence[str],
        lock: threading.Lock,
        counters: Counters,
    ) -> None:
        self._core = core
        self._group = group
        self._consumer_id = consumer_id
        self._streams = tuple(streams)
        self._lock = lock
        self._counters = counters
        #: Broker id of the group's coordinator, as last known.
        self.coordinator = ""
        #: The group epoch of the current assignment.
        self.epoch = 0
        self._interval = 1.0
        #: Seconds each attempt of a heartbeat call may take (see _CALL_FRACTION).
        self._call_timeout = core.options.rpc_timeout
        self._consumer_timeout = 15.0
        self._coordinator_timeout = 15.0
        #: The coordinator calls, and what they remember (the heartbeat thread's).
        self._lookup = CoordinatorLookup(core, group)
        #: The coordinator says this member (or the group) does not exist, and the
        #: heartbeat waits a consumer timeout before it believes it (a broker may not
        #: have applied the join yet). Written by the heartbeat thread, read by others.
        self.in_doubt = False
        #: When the coordinator (or a join) last answered this member. Written by the
        #: heartbeat thread (and join), read by others.
        self.heard_at = time.monotonic()
        #: :meth:`leave` was called (the consumer closes): a rejoin that completes
        #: afterwards leaves again. Guarded by the lock.
        self._left = False
        #: Ends a rejoin's calls and back-offs at once (see :meth:`stop_rejoining`).
        self._rejoining = DialAbort()

    @property
    def who(self) -> str:
        """``<group>/<member id>`` for log lines (two members of a group log side by side)."""
        return f"{self._group}/{self._consumer_id}"

    def join(self, abort: DialAbort | None = None) -> None:
        """Join the group and learn its coordinator, epoch and the server's timeouts.

        The call and the races around it are :func:`._joining.join_group`'s; ``abort``,
        if given, ends them at once when it aborts.

        Raises:
            NoSuchStreamError: if a stream does not exist.
            ConsumerIdInUseError: if another member of the group has this id.
            ServerError: if the server refused the join otherwise.
        """
        with self._lock:
            consumer_id = self._consumer_id
        response = join_group(self._core, self._group, consumer_id, self._streams, abort)
        with self._lock:
            if self.coordinator and response.coordinator != self.coordinator:
                self._counters.coordinator_changes += 1
            self.coordinator = response.coordinator
            self.epoch = int(response.epoch)
            consumer_timeout = max(0.1, response.consumerTimeout / 1e9)
            self._consumer_timeout = consumer_timeout
            self._interval = _HEARTBEAT_FRACTION * consumer_timeout
            self._call_timeout = min(
                self._core.options.rpc_timeout, max(0.1, _CALL_FRACTION * consumer_timeout)
            )
            self._coordinator_timeout = max(0.1, response.coordinatorTimeout / 1e9)
            self.heard_at = time.monotonic()

    def silent_for(self) -> float | None:
        """Seconds since the coordinator last answered, when that is too long to commit.

        ``None`` while this member may commit: the coordinator answered within
        :data:`_COMMIT_FRACTION` of the consumer timeout and has not said that the member
        does not exist. Otherwise the server may have dropped the member already and
        given its partitions to others (see :data:`_COMMIT_FRACTION`).
        """
        silent = time.monotonic() - self.heard_at
        if silent < _COMMIT_FRACTION * self._consumer_timeout and not self.in_doubt:
            return None
        return silent

    def may_commit(self) -> bool:
        """Whether this member may commit now (see :meth:`silent_for`); takes no lock."""
        return self.silent_for() is None

    @property
    def consumer_timeout(self) -> float:
        """The server's consumer timeout, in seconds, as the last join reported it."""
        return self._consumer_timeout

    @property
    def group(self) -> str:
        """The group's id."""
        return self._group

    @property
    def interval(self) -> float:
        """Seconds between two polls (see :data:`_HEARTBEAT_FRACTION`)."""
        return self._interval

    @property
    def call_timeout(self) -> float:
        """Seconds each attempt of a heartbeat call may take (see :data:`_CALL_FRACTION`)."""
        return self._call_timeout

    @property
    def coordinator_timeout(self) -> float:
        """The server's coordinator timeout, in seconds, as the last join reported it."""
        return self._coordinator_timeout

    def rejoin(self, consumer_id: str, stop: threading.Event) -> None:
        """Join again as ``consumer_id`` after the server dropped this member.

        Retries what may pass every :data:`_RETRY_WAIT` seconds until it works, ``stop``
        is set or :meth:`stop_rejoining` is called (which ends the join under way at
        once, its retries' back-offs included): an unreachable broker, and any server
        error without a more precise meaning. A member is dropped when its coordinator
        failed over, which is when the broker it asks has no metadata leader to forward
        the join to ("nats: no responders available for request", a NATS timeout, a
        leadership lost mid-apply): such an answer must not end the membership for
        good. A join that completes after :meth:`leave` was called (the consumer closed
        meanwhile) is left again at once.

        Raises:
            NoSuchStreamError: if a stream no longer exists.
            InvalidArgumentError, UnsupportedError, ConsumerGroupError: if the server
                refused the join for another reason.
        """
        with self._lock:
            self._consumer_id = consumer_id
        while not stop.is_set():
            try:
                self.join(self._rejoining)
                self._leave_if_left()
                return
            except ClientClosedError:
                if not self._rejoining.aborted:
                    raise  # the client closed: the heartbeat ends on it
                _log.info("consumer %s: rejoin cut short: the consumer closes", self.who)
                return
            except (BrokerUnavailableError, DeadlineExceededError, NotLeaderError) as exc:
                _log.warning("consumer %s: rejoining failed: %s; retrying", self.who, exc)
            except ConsumerIdInUseError:
                # The id is a member after all (a broker had not applied the join we
                # were told of): keep polling as it. Said, as the server cannot tell
                # this from another process given the same id meanwhile.
                _log.warning(
                    "consumer %s: the server says this id is a member of the group "
                    "already; polling on as that member (should another process use the "
                    "same consumer_id, both now read the same partitions)",
                    self.who,
                )
                self.heard_at = time.monotonic()
                self._leave_if_left()
                return
            except ServerError as exc:
                if type(exc) is not ServerError:
                    raise  # a precise refusal: invalid or unsupported
                _log.warning("consumer %s: rejoining failed: %s; retrying", self.who, exc)
            stop.wait(_RETRY_WAIT)

    def join_first(self) -> None:
        """The first :meth:`join` (on the user's thread), ended at once by
        :meth:`stop_rejoining` as a rejoin is: close() from another thread does not wait
        for its retries (up to the retry policy's ``max_delay``). A join abandoned in
        flight is left again (it may have been applied).

        Raises:
            ClientClosedError: :meth:`stop_rejoining` was called (or the client closed).
            NoSuchStreamError, ConsumerIdInUseError, ServerError: as :meth:`join`.
        """
        self.join(self._rejoining)

    def leave_if_left(self) -> None:
        """After a join that completed as the consumer closed: leave again if
        :meth:`leave` was called meanwhile (see :meth:`_leave_if_left`)."""
        self._leave_if_left()

    @property
    def closing(self) -> DialAbort:
        """Aborted once the consumer closes (:meth:`stop_rejoining`): the look-ups of
        its readers' start positions end with it, not after their back-offs."""
        return self._rejoining

    def stop_rejoining(self) -> None:
        """End a rejoin (or :meth:`join_first`) in progress at once, and any later one
        (the consumer closes, from any thread): its join call under way, its back-offs
        and its waits raise ``ClientClosedError``, and :meth:`rejoin` returns. A join
        abandoned in flight is left again (it may have been applied), within one
        ``rpc_timeout``.

        Without it, a rejoin retrying an unreachable broker kept the heartbeat thread
        for up to the retry policy's ``max_delay`` (10 s by default), past close()'s
        bound for its threads."""
        self._rejoining.abort()

    def _leave_if_left(self) -> None:
        """After a rejoin: leave again if :meth:`leave` was called meanwhile.

        The consumer closing does not wait for a rejoin without limit: its leave may
        reach the server before the join, which would keep the new member in the group,
        holding partitions nobody reads, until the server's consumer timeout.
        """
        with self._lock:
            left = self._left
        if left:
            _log.info("consumer %s: rejoined while closing; leaving again", self.who)
            self.leave()

    def leave(self) -> None:
        """Leave the group; a member the server already dropped is not an error.

        A rejoin in progress leaves again once it has joined (see :meth:`rejoin`).
        """
        with self._lock:
            self._left = True
            consumer_id = self._consumer_id
        until = self._leave_deadline()
        if until is None:
            _log.info(
                "consumer %s: not leaving the group: the coordinator last answered %.1fs "
                "ago, so the server may be expiring this member right now, and a v1.9.0 "
                "server crashes on a leave at that moment; its consumer timeout (%.1fs) "
                "removes the member instead",
                self.who,
                time.monotonic() - self.heard_at,
                self._consumer_timeout,
            )
            return
        try:
            self._core.call_any(
                rpcs.LEAVE_CONSUMER_GROUP,
                api_pb2.LeaveConsumerGroupRequest(groupId=self._group, consumerId=consumer_id),
                context=CallContext.GROUP,
                deadline=until,
            )
        except (ConsumerGroupNotFoundError, NotGroupMemberError, ClientClosedError):
            pass  # already out of the group
        except LiftbridgeError as exc:
            _log.warning("consumer %s: leaving the group failed: %s", self.who, exc)

    def _leave_deadline(self) -> float | None:
        """When a leave must have ended, or ``None`` if this member must not leave.

        See :data:`_LEAVE_FRACTION`. A member that has not heard from its coordinator
        for that long polls it once more (which resets its timer on the server), if the
        timer cannot have fired yet; the heartbeat thread has stopped by then.
        """
        timeout = self._consumer_timeout
        if time.monotonic() - self.heard_at >= _LEAVE_FRACTION * timeout:
            # The timer fires no sooner than 0.75 of the timeout after the last answer;
            # a poll that is answered well before then has reset it (the answer then
            # came within a quarter of the timeout of the reset, as the rule needs).
            left = self.heard_at + (_COMMIT_FRACTION - 0.1) * timeout - time.monotonic()
            if left > 0:
                try:
                    self.poll(min(self._call_timeout, left))
                    self.heard_at = time.monotonic()
                except LiftbridgeError:
                    pass
        until = self.heard_at + _LEAVE_FRACTION * timeout
        return until if time.monotonic() < until else None

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(
        self,
        stop: threading.Event,
        reconcile: Reconcile,
        fail: Fail,
        rejoin: Rejoin | None,
        tend: Callable[[], None] | None = None,
    ) -> None:
        """Poll the coordinator until ``stop`` is set (the ``liftbridge-consumer`` thread):
        :meth:`.Heartbeat.run`, with this member's calls."""
        Heartbeat(self, stop, reconcile, fail, rejoin, tend).run()

    def round_budget(self) -> Budget:
        """The time of one heartbeat round starting now: its poll and the coordinator
        calls a failed poll makes (asking for, and reporting, the coordinator).

        One heartbeat interval (a heartbeat call's time if that is longer): each of
        those calls retried under the whole retry policy (up to ``max_delay``, 10 s by
        default) made a round overrun the consumer timeout, and the server expired the
        member. Calls retry on other brokers only within it; the next round, after at
        most :data:`_RETRY_WAIT`, asks again.
        """
        ends = time.monotonic() + max(self._interval, self._call_timeout)
        return Budget(retry_until=ends, ends=ends)

    def poll(self, timeout: float | None = None) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
        """Poll the coordinator, within ``timeout`` (default: a heartbeat call's time),
        looking its address up included.

        Raises:
            DeadlineExceededError: the look-up took all of ``timeout``.
        """
        # One budget for the look-up and the poll: a refresh under the whole retry
        # policy made the poll overrun the consumer timeout (the member was expired).
        budget = Budget.once(self._call_timeout if timeout is None else timeout)
        with self._lock:
            coordinator, epoch, consumer_id = self.coordinator, self.epoch, self._consumer_id
        address = self._lookup.address(coordinator, budget)
        request = api_pb2.FetchConsumerGroupAssignmentsRequest(
            groupId=self._group, consumerId=consumer_id, epoch=epoch
        )
        left = budget.ends - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError(
                "polling the coordinator: looking its address up took the call's time",
                code="DEADLINE_EXCEEDED",
            )
        response: api_pb2.FetchConsumerGroupAssignmentsResponse = self._core.invoke(
            address,
            rpcs.FETCH_CONSUMER_GROUP_ASSIGNMENTS,
            request,
            context=CallContext.GROUP,
            timeout=left,
        )
        return response

    def refresh_group(self, budget: Budget | None = None) -> bool:
        """Learn the group's coordinator and epoch, within ``budget`` (the heartbeat
        round's; default: a round starting now); whether either changed.

        The metadata leader is asked (:meth:`CoordinatorLookup.ask`, one round trip).
        ``FetchMetadata`` is the fallback only when the server's refusal cannot be read,
        or the metadata leader has not answered for the coordinator timeout: with a
        broker down, a v1.9.0 server answers ``FetchMetadata`` only after waiting up to
        3 s for the dead peer, and a member that spends that long finding the new
        coordinator is expired by it (the poll is the heartbeat). While the metadata
        leader is being elected ("nats: no responders"), no coordinator is named
        either: the heartbeat asks again after :data:`_RETRY_WAIT`. After that long a
        silence ``FetchMetadata`` gets only a heartbeat call's time (it answers in time
        when every broker is up); only for an unreadable refusal, where it is the sole
        way, is it given ``rpc_timeout``. Neither outlasts ``budget``.

        Raises:
            ConsumerGroupNotFoundError: if the group no longer exists.
        """
        began = time.monotonic()
        budget = self.round_budget() if budget is None else budget
        with self._lock:
            consumer_id = self._consumer_id
        found = self._lookup.ask(consumer_id, self._call_timeout, budget, self.who)
        if found is None:
            fallback = self._lookup.fallback_due(
                began, self._coordinator_timeout, self._call_timeout
            )
            if fallback is not None:
                found = self._lookup.from_metadata(fallback or None, budget)
        _log.debug(
            "consumer %s: coordinator lookup answered %s in %.2fs",
            self.who,
            found,
            time.monotonic() - began,
        )
        if found is None:
            return False
        coordinator, epoch = found
        with self._lock:
            changed = (coordinator, epoch) != (self.coordinator, self.epoch)
            if coordinator != self.coordinator:
                self._counters.coordinator_changes += 1
            self.coordinator, self.epoch = coordinator, epoch
        if changed:
            _log.info("consumer %s: coordinator %s, epoch %d", self.who, coordinator, epoch)
        return changed

    def report_coordinator(self, budget: Budget | None = None) -> None:
        """Report the coordinator as unreachable, within ``budget`` (the round's;
        default: a round starting now)."""
        budget = self.round_budget() if budget is None else budget
        if budget.ends <= time.monotonic():
            return  # the round's time is up: the next round reports it
        with self._lock:
            coordinator, epoch, consumer_id = self.coordinator, self.epoch, self._consumer_id
        _log.warning(
            "consumer %s: coordinator %s unreachable for %.1fs; reporting it",
            self.who,
            coordinator,
            self._coordinator_timeout,
        )
        self._lookup.report(consumer_id, coordinator, epoch, self._call_timeout, budget, self.who)
