"""Finding a consumer group's coordinator: its address, who it is after a failover, and
reporting one that cannot be reached.

:class:`~liftbridge_sync.consumer._membership.Membership` decides when to ask (its
heartbeat); :class:`CoordinatorLookup` makes the calls and remembers what they need
between rounds. Thread-safe as :class:`CoordinatorLookup` says.
"""

from __future__ import annotations

import logging
import re
import time

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ConsumerGroupNotFoundError,
    CoordinatorMismatchError,
    LiftbridgeError,
)

__all__ = ["CoordinatorLookup"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: A coordinator id no broker has and an epoch no group reaches: a report naming them
#: is refused with the group's current coordinator and epoch (see
#: CoordinatorLookup.ask).
_PROBE_COORDINATOR = "liftbridge-sync: which broker is the coordinator?"
_PROBE_EPOCH = 2**64 - 1
_CURRENT_COORDINATOR = re.compile(r"current coordinator: (.*?) epoch: (\d+)")


class CoordinatorLookup:
    """The coordinator calls of one member, and what they remember between rounds.

    Every call keeps to the ``budget`` it is given (the heartbeat round's), each attempt
    also to the ``timeout`` given (a heartbeat call's time).

    Thread-safe: used by the heartbeat thread alone (and a test while none runs).
    """

    def __init__(self, core: ClientCore, group: str) -> None:
        self._core = core
        self._group = group
        #: Broker id -> the address any metadata last gave it.
        self._addresses: dict[str, str] = {}
        #: Since when asking the metadata leader for the coordinator has failed (None:
        #: it answered last time), and whether its last refusal could not be read.
        self.unanswered_since: float | None = None
        self._unreadable = False

    def address(self, coordinator: str, budget: Budget) -> str:
        """The address of broker ``coordinator``, refreshing the metadata only if unknown.

        A broker that was down when the client last read the metadata is missing from
        it, yet it may be the new coordinator once restarted; it is reached at the
        address it last had rather than after a fresh ``FetchMetadata``, which a v1.9.0
        server answers only after up to 3 s while another broker is down (long enough
        for the new coordinator to expire this member).

        A metadata fetch keeps to ``budget`` (the poll's).

        Raises:
            BrokerUnavailableError: if no metadata ever listed the broker.
            DeadlineExceededError: ``budget`` ran out while another thread refreshed.
        """
        for broker in self._core.metadata.get(budget).brokers:
            self._addresses[broker.id] = broker.address
        address = self._addresses.get(coordinator)
        if address is None:
            for broker in self._core.metadata.refresh(budget).brokers:
                self._addresses[broker.id] = broker.address
            address = self._addresses.get(coordinator)
        if address is None:
            raise BrokerUnavailableError(f"coordinator {coordinator!r} is not in the metadata")
        return address

    def ask(
        self, consumer_id: str, timeout: float, budget: Budget, who: str
    ) -> tuple[str, int] | None:
        """The group's coordinator and epoch as the metadata leader knows them, or None
        (also when ``budget`` has no time left: not asked then).

        A ``ReportConsumerGroupCoordinator`` naming a coordinator and epoch the group
        cannot have is always refused, with the current ones in the refusal ("Coordinator
        generation mismatch, current coordinator: X epoch: N, ...", server metadata.go
        from v1.8.0 to HEAD): nothing is reported, and the answer comes from the metadata
        leader's Raft state without the broker survey ``FetchMetadata`` waits for.

        Raises:
            ConsumerGroupNotFoundError: if the group no longer exists.
        """
        request = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self._group,
            consumerId=consumer_id,
            coordinator=_PROBE_COORDINATOR,
            epoch=_PROBE_EPOCH,
        )
        if budget.ends <= time.monotonic():
            return None  # the round's time is up: not an unanswered ask
        try:
            self._report_call(request, timeout, budget)
        except CoordinatorMismatchError as exc:
            match = _CURRENT_COORDINATOR.search(exc.details or "")
            if match is not None:
                self.unanswered_since = None
                return match.group(1), int(match.group(2))
            _log.debug("consumer %s: unexpected refusal: %s", who, exc)
            self._unreadable = True
            return None
        except ConsumerGroupNotFoundError:
            raise
        except LiftbridgeError as exc:
            _log.debug("consumer %s: asking for the coordinator failed: %s", who, exc)
        if self.unanswered_since is None:
            self.unanswered_since = time.monotonic()
        return None

    def fallback_due(
        self, now: float, coordinator_timeout: float, call_timeout: float
    ) -> float | None:
        """Whether to ask ``FetchMetadata`` after :meth:`ask` gave no answer.

        At once if the server's refusal could not be read (a server whose text differs);
        after a failed ask only once the metadata leader has not answered for
        ``coordinator_timeout``. Failed asks come while a new metadata leader is elected,
        when ``FetchMetadata`` is at its slowest, and they pass within seconds.

        Returns:
            ``None``: not due. Otherwise the seconds the call may take, ``0.0`` meaning
            ``rpc_timeout``.
        """
        if self._unreadable:
            self._unreadable = False
            return 0.0
        since = self.unanswered_since
        if since is not None and now - since >= coordinator_timeout:
            return call_timeout
        return None

    def from_metadata(self, timeout: float | None, budget: Budget) -> tuple[str, int] | None:
        """The group's coordinator and epoch from ``FetchMetadata``, if it lists the group.

        Args:
            timeout: Seconds each attempt may take (``None``: ``rpc_timeout``).
            budget: The heartbeat round's: no attempt outlasts it.

        Raises:
            ConsumerGroupNotFoundError: if the group no longer exists.
            DeadlineExceededError: ``budget`` had no time left.
        """
        response = self._core.call_any(
            rpcs.FETCH_METADATA,
            api_pb2.FetchMetadataRequest(groups=[self._group]),
            timeout=timeout,
            deadline=budget.ends,
            retry_until=budget.retry_until,
        )
        for group in response.groupMetadata:
            if group.groupId != self._group:
                continue
            if group.error == api_pb2.ConsumerGroupMetadata.UNKNOWN_GROUP:
                raise ConsumerGroupNotFoundError(f"consumer group {self._group!r} does not exist")
            return group.coordinator, int(group.epoch)
        return None

    def report(
        self,
        consumer_id: str,
        coordinator: str,
        epoch: int,
        timeout: float,
        budget: Budget,
        who: str,
    ) -> None:
        """Report ``coordinator`` (at ``epoch``) as unreachable, within ``budget``."""
        request = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self._group, consumerId=consumer_id, coordinator=coordinator, epoch=epoch
        )
        try:
            self._report_call(request, timeout, budget)
        except CoordinatorMismatchError:
            pass  # already replaced
        except LiftbridgeError as exc:
            _log.warning("consumer %s: reporting the coordinator failed: %s", who, exc)

    def _report_call(
        self,
        request: api_pb2.ReportConsumerGroupCoordinatorRequest,
        timeout: float | None,
        budget: Budget,
    ) -> None:
        """``ReportConsumerGroupCoordinator`` to any broker, within ``budget`` (both the
        probe of :meth:`ask` and the report of :meth:`report` send one)."""
        self._core.call_any(
            rpcs.REPORT_CONSUMER_GROUP_COORDINATOR,
            request,
            context=CallContext.GROUP,
            timeout=timeout,
            deadline=budget.ends,
            retry_until=budget.retry_until,
        )
