"""Joining a consumer group: the ``JoinConsumerGroup`` call and the races around it.

A join is not idempotent, and the server refuses one that meets the work of another
call. :func:`join_group` tells those refusals from the ones for good:

* refused "already a member" after an attempt whose answer was lost (retried on
  UNAVAILABLE): the member is this one; it leaves and joins again, for the coordinator,
  epoch and timeouts only the lost answer carried;
* refused "consumer group already exists" (another member created the group between
  the server's look-up and this join's creation of it) or "does not exist" (the
  group's last member left before this join was applied): it joins again, up to
  :data:`_JOIN_RACES` times;
* failed otherwise after an attempt the server may have applied (a deadline, the
  server's own included: INTERNAL "context deadline exceeded"; an answer lost): it
  leaves before the error propagates;
* refused "already a member" otherwise: another member has the id, a
  :class:`~liftbridge_sync.errors.ConsumerIdInUseError` naming the group and the id;
* abandoned by its ``abort`` (the consumer closing during a rejoin): it leaves, within
  one ``rpc_timeout``, as the attempt abandoned may have been applied.

:class:`~liftbridge_sync.consumer._membership.Membership` keeps what the answer says.
Thread-safe: functions of the core they are given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import (
    CallContext,
    group_created_meanwhile,
    maybe_carried_out,
)
from liftbridge_sync.errors import (
    ConsumerGroupNotFoundError,
    ConsumerIdInUseError,
    LiftbridgeError,
    NotGroupMemberError,
    ServerError,
)

__all__ = ["join_group"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: Joins made in a row while the group is created or removed under them. The first
#: members of a group (replicas started together) race to create it: the server creates
#: it for one and refuses the others "consumer group already exists"; a join may also
#: find the group it looked up removed (its last member left) by the time it is applied.
#: Each such refusal means another member's join or leave was applied meanwhile, and
#: joining again joins (or creates) the group as it is now.
_JOIN_RACES = 5


def join_group(
    core: ClientCore,
    group: str,
    consumer_id: str,
    streams: Sequence[str],
    abort: DialAbort | None = None,
) -> api_pb2.JoinConsumerGroupResponse:
    """Join ``group`` as ``consumer_id`` (see the module's docstring).

    ``abort``, if given, ends the calls and their back-offs at once when it aborts
    (another thread closing the consumer).

    Raises:
        NoSuchStreamError: if a stream does not exist.
        ConsumerIdInUseError: if another member of the group has this id.
        ServerError: if the server refused the join otherwise.
        ClientClosedError: ``abort`` aborted (or the client was closed).
    """
    tried: list[LiftbridgeError] = []
    try:
        return _join_call(core, group, consumer_id, streams, tried, abort)
    except ConsumerIdInUseError as exc:
        raise ConsumerIdInUseError(
            f"consumer group {group!r}: the consumer_id {consumer_id!r} is already a "
            "member of the group: another live member uses it, or one that used it ended "
            "without leaving and the server has not expired it yet (it does after its "
            "consumer timeout); give each member its own consumer_id (or none: one is "
            "generated), or join again after that timeout",
            group=group,
            consumer_id=consumer_id,
            code=exc.code,
            details=exc.details,
        ) from exc
    except LiftbridgeError as exc:
        earlier = maybe_carried_out(tried)
        if abort is not None and abort.aborted and earlier is None:
            # An attempt abandoned in flight may have been applied all the same.
            earlier = exc
        if earlier is not None:
            _leave_after_failed_join(core, group, consumer_id, exc, earlier)
        raise


def _join_call(
    core: ClientCore,
    group: str,
    consumer_id: str,
    streams: Sequence[str],
    tried: list[LiftbridgeError],
    abort: DialAbort | None,
) -> api_pb2.JoinConsumerGroupResponse:
    """``JoinConsumerGroup`` as ``consumer_id``; again after a leave when the answer of
    an attempt that joined was lost, and again when the group was created or removed
    under the join (see :data:`_JOIN_RACES`).

    ``tried`` receives the error of every failed attempt since the last leave;
    ``abort`` ends the calls (see :func:`join_group`).

    Raises:
        ConsumerIdInUseError: the server's refusal, as mapped (no group or id).
    """
    who = f"{group}/{consumer_id}"
    request = api_pb2.JoinConsumerGroupRequest(
        groupId=group, consumerId=consumer_id, streams=list(streams)
    )
    races = 0
    left = False
    while True:
        # This call's failures are tried[begun:]: one of an earlier call, refused
        # because another member created the group meanwhile, joined nothing.
        begun = len(tried)
        try:
            response: api_pb2.JoinConsumerGroupResponse = core.call_any(
                rpcs.JOIN_CONSUMER_GROUP,
                request,
                context=CallContext.GROUP,
                failed=tried,
                abort=abort,
            )
            return response
        except ConsumerIdInUseError:
            earlier = None if left else maybe_carried_out(tried[begun:])
            if earlier is None:
                raise
            _log.info(
                "consumer %s: joined by an attempt whose answer was lost (%s); leaving "
                "and joining again",
                who,
                earlier,
            )
            leave_now(core, group, consumer_id, abort=abort)
            left = True
            tried.clear()  # what those attempts may have applied, the leave undid
        except (ConsumerGroupNotFoundError, ServerError) as exc:
            races += 1
            raced = isinstance(exc, ConsumerGroupNotFoundError) or group_created_meanwhile(exc)
            if not raced or races >= _JOIN_RACES:
                raise
            _log.info(
                "consumer %s: another member created or removed the group as this one "
                "joined (%s); joining again",
                who,
                exc,
            )


def _leave_after_failed_join(
    core: ClientCore,
    group: str,
    consumer_id: str,
    error: LiftbridgeError,
    earlier: LiftbridgeError,
) -> None:
    """The join failed with ``error`` after an attempt the server may have applied
    (``earlier``: its answer lost, or its deadline expired): leave, within one
    ``rpc_timeout``. Otherwise the member, if joined, would hold partitions nobody reads
    until the server's consumer timeout, and its id be refused until then."""
    who = f"{group}/{consumer_id}"
    _log.warning(
        "consumer %s: joining failed (%s) after an attempt the server may have applied "
        "(%s); leaving the group",
        who,
        error,
        earlier,
    )
    try:
        leave_now(core, group, consumer_id, time.monotonic() + core.options.rpc_timeout)
    except LiftbridgeError as exc:
        _log.warning(
            "consumer %s: leaving after the failed join failed too (%s): if the join was "
            "applied, the server removes the member after its consumer timeout",
            who,
            exc,
        )


def leave_now(
    core: ClientCore,
    group: str,
    consumer_id: str,
    deadline: float | None = None,
    abort: DialAbort | None = None,
) -> None:
    """Leave ``group`` as ``consumer_id`` just joined (its timer on the server was just
    reset: no expiry can race the leave), by ``deadline`` (a ``time.monotonic()``;
    ``None``: under the retry policy), ended at once when ``abort`` (if given) aborts;
    not a member is no error."""
    try:
        core.call_any(
            rpcs.LEAVE_CONSUMER_GROUP,
            api_pb2.LeaveConsumerGroupRequest(groupId=group, consumerId=consumer_id),
            context=CallContext.GROUP,
            deadline=deadline,
            abort=abort,
        )
    except (ConsumerGroupNotFoundError, NotGroupMemberError):
        pass
