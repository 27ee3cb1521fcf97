"""Where a partition subscription subscribes, and the time its metadata look-ups get.

:class:`PartitionLookup` finds the partition's leader (or a random in-sync replica)
and refreshes the stream's metadata, each look-up within the ``get`` timeout it runs
in, the end of ``resubscribe_wait`` and the end of its resubscribe attempt (one
``rpc_timeout`` past ``resubscribe_wait`` at most), and at least
:data:`ATTEMPT_AT_LEAST`. Not thread-safe by itself: only the iterating thread looks
up; ``close()`` ends a look-up under way through the abort it was given.
"""

from __future__ import annotations

import random
import time

from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.leader import leader_address_of, partition_info
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    DeadlineExceededError,
    NoSuchPartitionError,
)
from liftbridge_sync.models import Metadata
from liftbridge_sync.subscription.target import SubscriptionTarget

__all__ = ["ATTEMPT_AT_LEAST", "PartitionLookup", "at_least_a_moment", "left_of"]

#: The least one resubscribe attempt gets for its metadata look and the server's
#: handshake, whatever is left of the ``get(timeout)`` it runs in (``rpc_timeout``
#: bounds each otherwise). Cut at once, a ``get(0)`` polling loop after a lost
#: connection subscribed again and again without ever reading a message.
ATTEMPT_AT_LEAST = 0.05


def at_least_a_moment(deadline: float | None) -> float | None:
    """``deadline`` (a ``get`` timeout's), or ``ATTEMPT_AT_LEAST`` from now if later: the
    question of what a refusal means is part of an attempt already under way, and
    asked past a nearly spent timeout with what little is left, each broker had about
    0.01 s to answer and the refusal's meaning was lost (taken for a passing one)."""
    if deadline is None:
        return None
    return max(deadline, time.monotonic() + ATTEMPT_AT_LEAST)


def left_of(ends: float) -> float:
    """The seconds left until ``ends``, at least ``ATTEMPT_AT_LEAST``: a look-up that
    took all of an attempt leaves a handshake that is already under way its chance, as
    a deadline does."""
    return max(ends - time.monotonic(), ATTEMPT_AT_LEAST)


class PartitionLookup:
    """The metadata look-ups of one partition subscription.

    Not thread-safe: the iterating thread looks up; another thread's ``close()`` aborts
    ``abort``, which ends a look-up under way.
    """

    def __init__(self, core: ClientCore, target: SubscriptionTarget, abort: DialAbort) -> None:
        self._core = core
        self._target = target
        self._abort = abort

    def attempt_ends(self, until: float | None) -> float | None:
        """When a resubscribe attempt starting now ends at the latest (``None``: not a
        resubscribe): one ``rpc_timeout`` past ``until``, or past its own start if later,
        as the resubscribe's own retry policy makes at least one attempt."""
        if until is None:
            return None
        return max(until, time.monotonic()) + self._core.options.rpc_timeout

    def budget(
        self, deadline: float | None, until: float | None, ends: float | None = None
    ) -> Budget | None:
        """The budget of one metadata look-up (``None``: the retry policy's) within
        ``ends``, the end of the attempt it is part of (:meth:`attempt_ends`; one
        starting now without it). A look-up late in its attempt still gets
        ``ATTEMPT_AT_LEAST``: it is already under way and must be able to answer."""
        abort = self._abort
        if until is not None:
            now = time.monotonic()
            if ends is None:
                ends = max(until, now) + self._core.options.rpc_timeout
            ends = max(ends, now + ATTEMPT_AT_LEAST)
            if deadline is None:
                return Budget(until, ends, abort=abort)
            return Budget(min(deadline, until), min(deadline, ends), abort=abort)
        return None if deadline is None else Budget(deadline, deadline, abort=abort)

    def refresh(
        self,
        deadline: float | None,
        until: float | None,
        ends: float | None = None,
        *,
        drop_unknown: bool = False,
    ) -> Metadata:
        """Refresh the stream's metadata once, within :meth:`budget`'s time (with
        ``drop_unknown``, the cache drops the stream unless the answer has it); the
        answer.

        Raises:
            BrokerUnavailableError: no broker answered in time.
            ClientClosedError: closed meanwhile (or the client).
        """
        budget = self.budget(deadline, until, ends)
        return self._core.refresh_once(
            [self._target.stream],
            None if budget is None else budget.ends,
            drop_unknown=drop_unknown,
            abort=self._abort,
        )

    def address(
        self,
        refresh: bool,
        deadline: float | None,
        until: float | None,
        ends: float | None,
        *,
        leader_only: bool,
    ) -> tuple[str, bool]:
        """Where to subscribe, and whether it is the leader: the leader, or a random
        in-sync replica if the target allows it and not ``leader_only`` (a follower was
        found lagging).

        The look-up keeps to ``deadline`` (the get's), to ``until`` (the end of
        ``resubscribe_wait``) and to ``ends`` (its attempt's end, one ``rpc_timeout``
        past ``until`` at most).
        """
        target, core = self._target, self._core
        budget = self.budget(deadline, until, ends)
        if refresh:
            self.refresh(deadline, until, ends)
            snapshot = core.metadata.get()
            info = snapshot.partition(target.stream, target.partition)
            if info is None:
                raise NoSuchPartitionError(
                    f"no such partition: stream {target.stream!r} partition {target.partition}",
                    code="NOT_FOUND",
                )
        else:
            # A partition the cache lacks is looked up within the budget: under the
            # whole retry policy it held get(timeout), or a resubscribe past
            # resubscribe_wait, for that policy.
            try:
                info = partition_info(
                    core, target.stream, target.partition, refresh=False, budget=budget
                )
            except DeadlineExceededError as exc:
                if budget is None:
                    raise
                # Retried: if the get's time ran out, the back-off before the retry ends
                # the get with TimeoutError (the read goes on); if resubscribe_wait's,
                # the retry policy (max_delay: what was left of it) gives up.
                raise BrokerUnavailableError(
                    f"subscribe: looking the partition's leader up failed: {exc}"
                ) from exc
            snapshot = core.metadata.get()
        leader = leader_address_of(core, info)
        if target.read_isr_replica and not leader_only:
            brokers = [b for b in map(snapshot.broker, info.isr) if b is not None]
            if brokers:
                address = random.choice(brokers).address
                return address, address == leader
        return leader, True
