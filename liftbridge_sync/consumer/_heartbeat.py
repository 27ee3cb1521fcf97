"""A consumer's heartbeat: the ``liftbridge-consumer-<group>`` thread's loop, which polls
the coordinator and acts on each answer, and on each failure: the coordinator looked
up again or reported, a member the server dropped rejoining (or failing).

The calls it makes, and the standing they keep, are
:class:`~liftbridge_sync.consumer._membership.Membership`'s (the loop is what
:meth:`Membership.heartbeat` runs); what each assignment does is the consumer's, handed
in as callbacks. Thread-safe: a :class:`Heartbeat` runs on its thread alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync.errors import (
    ClientClosedError,
    ConsumerGroupNotFoundError,
    CoordinatorMismatchError,
    InternalThreadError,
    LiftbridgeError,
    NotGroupMemberError,
)

__all__ = ["RETRY_WAIT", "Fail", "Heartbeat", "Reconcile", "Rejoin"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: Wait before polling again after a failed poll (the Go client waits 2 s).
RETRY_WAIT = 0.5

#: Called with each polled assignment and its epoch.
Reconcile = Callable[[Iterable[api_pb2.PartitionAssignment], int], None]
#: Called with what ends the membership (the iterator raises it).
Fail = Callable[[BaseException], None]
#: Called with the server's answer when it dropped this member; joins again (or
#: raises what ends the membership).
Rejoin = Callable[[BaseException], None]


class _Member(Protocol):
    """What :class:`Heartbeat` needs of a member's standing (see ``Membership``)."""

    heard_at: float
    in_doubt: bool

    @property
    def who(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def interval(self) -> float: ...

    @property
    def call_timeout(self) -> float: ...

    @property
    def coordinator_timeout(self) -> float: ...

    @property
    def consumer_timeout(self) -> float: ...

    def round_budget(self) -> Budget: ...

    def poll(
        self, timeout: float | None = None
    ) -> api_pb2.FetchConsumerGroupAssignmentsResponse: ...

    def refresh_group(self, budget: Budget | None = None) -> bool: ...

    def report_coordinator(self, budget: Budget | None = None) -> None: ...


class Heartbeat:
    """One run of the heartbeat loop for ``member`` (see :meth:`run`).

    Thread-safe: run on the heartbeat thread alone; ``stop`` may be set from any.
    """

    def __init__(
        self,
        member: _Member,
        stop: threading.Event,
        reconcile: Reconcile,
        fail: Fail,
        rejoin: Rejoin | None,
        tend: Callable[[], None] | None = None,
    ) -> None:
        self._member = member
        self._stop = stop
        self._reconcile = reconcile
        self._fail = fail
        self._rejoin = rejoin
        self._tend = tend

    def run(self) -> None:
        """Poll the coordinator until ``stop`` is set (the ``liftbridge-consumer`` thread).

        ``tend``, if any, is called before each poll (it closes a consumer dropped
        without close(), which sets ``stop``). Each answer is handed to ``reconcile``.
        When the server dropped this member, ``rejoin`` is called (or, without one,
        ``fail``); what ends the membership (no rejoin, a rejoin refused, the thread
        itself failing) is handed to ``fail``.
        """
        member = self._member
        try:
            self._loop()
        except BaseException as exc:  # never die silently: the iterator raises it
            if not self._stop.is_set():
                _log.exception("consumer %s: heartbeat thread failed", member.who)
                error = exc
                if not isinstance(exc, LiftbridgeError):  # e.g. out of threads
                    error = InternalThreadError(
                        f"the liftbridge-consumer-{member.group} thread died ({exc!r}): "
                        "this member no longer polls its group; close it and create a new one"
                    )
                    error.__cause__ = exc
                self._fail(error)

    def _loop(self) -> None:
        member, stop, tend = self._member, self._stop, self._tend
        #: Since when the cluster says this member (or the group) does not exist.
        unknown_since: float | None = None
        while not stop.is_set():
            if tend is not None:
                tend()
                if stop.is_set():
                    return
            wait = member.interval
            round_ = member.round_budget()
            try:
                try:
                    response = member.poll()  # within the round: it begins it
                    member.heard_at = time.monotonic()
                    unknown_since = None
                    member.in_doubt = False
                    began = time.monotonic()
                    self._reconcile(response.assignments, int(response.epoch))
                    took = time.monotonic() - began
                    if took > member.call_timeout:
                        _log.debug(
                            "consumer %s: applying the assignment took %.2fs", member.who, took
                        )
                except CoordinatorMismatchError as exc:
                    _log.info("consumer %s: %s; reading the group's metadata", member.who, exc)
                    wait = 0.0 if member.refresh_group(round_) else RETRY_WAIT
                except (ConsumerGroupNotFoundError, NotGroupMemberError, ClientClosedError):
                    raise
                except LiftbridgeError as exc:
                    _log.warning("consumer %s: polling the coordinator failed: %s", member.who, exc)
                    wait = min(RETRY_WAIT, member.interval)
                    if not self._safe_refresh(round_) and (
                        time.monotonic() - member.heard_at > member.coordinator_timeout
                    ):
                        member.report_coordinator(round_)
                        # The report may have completed a majority: a new coordinator
                        # is then named at once; poll it without waiting.
                        if self._safe_refresh(round_):
                            wait = 0.0
            except (ConsumerGroupNotFoundError, NotGroupMemberError) as exc:
                # In a cluster a broker may not have applied the join yet: only an
                # answer that persists for a consumer timeout means we were dropped.
                now = time.monotonic()
                unknown_since = now if unknown_since is None else unknown_since
                member.in_doubt = True
                if now - unknown_since >= member.consumer_timeout:
                    if stop.is_set():
                        return
                    if self._rejoin is None:
                        _log.error("consumer %s: dropped by the server: %s", member.who, exc)
                        self._fail(exc)
                        return
                    self._rejoin(exc)
                    unknown_since = None
                    member.in_doubt = False
                    wait = 0.0
                else:
                    wait = min(RETRY_WAIT, member.interval)
            except ClientClosedError:
                return
            except LiftbridgeError as exc:
                _log.warning("consumer %s: %s", member.who, exc)
                wait = min(RETRY_WAIT, member.interval)
            if wait > 0:
                stop.wait(wait)

    def _safe_refresh(self, budget: Budget) -> bool:
        """:meth:`Membership.refresh_group`, a failure (but the group's end) logged."""
        try:
            return self._member.refresh_group(budget)
        except ConsumerGroupNotFoundError:
            raise
        except LiftbridgeError as exc:
            _log.warning("consumer %s: no group metadata: %s", self._member.who, exc)
            return False
