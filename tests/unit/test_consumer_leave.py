"""When a closing member leaves its group, and when it leaves that to the server.

v1.9.0 crashes (a nil dereference in ``consumerExpired``, groups.go) when a member
leaves while the server is expiring it: seen in a test run, the server exited with
code 2. The member's timer fires no sooner than 0.75 of the consumer timeout after
the coordinator's last answer, so a member leaves only within half of it, polls once
more first when later, and otherwise leaves the removal to the server.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from typing import Any

import pytest

from liftbridge_sync import ClientOptions
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.errors import NotGroupMemberError

TIMEOUT = 10.0


class StubCore:
    """Records the leave (and its deadline) and the polls; a poll answers or raises."""

    def __init__(self, poll_error: BaseException | None = None) -> None:
        self.options = ClientOptions(addresses=("127.0.0.1:1",))
        broker = types.SimpleNamespace(id="n0", address="127.0.0.1:1")
        self.metadata = types.SimpleNamespace(
            get=lambda budget=None: types.SimpleNamespace(brokers=[broker])
        )
        self.poll_error = poll_error
        self.polls: list[float | None] = []
        self.leaves: list[float | None] = []

    def call_any(self, rpc: Any, request: Any, **kwargs: Any) -> Any:
        assert rpc.name == "LeaveConsumerGroup"
        self.leaves.append(kwargs.get("deadline"))
        return api_pb2.LeaveConsumerGroupResponse()

    def invoke(self, address: str, rpc: Any, request: Any, **kwargs: Any) -> Any:
        assert rpc.name == "FetchConsumerGroupAssignments"
        self.polls.append(kwargs.get("timeout"))
        if self.poll_error is not None:
            raise self.poll_error
        return api_pb2.FetchConsumerGroupAssignmentsResponse(epoch=3)


def member(core: StubCore, heard_ago: float) -> Membership:
    m = Membership(core, "g", "m", ["s"], threading.Lock(), Counters())  # type: ignore[arg-type]
    m.coordinator, m.epoch = "n0", 3
    m._consumer_timeout = TIMEOUT
    m._call_timeout = 0.25 * TIMEOUT
    m.heard_at = time.monotonic() - heard_ago
    return m


def test_a_member_heard_from_lately_leaves_within_half_the_timeout() -> None:
    core = StubCore()
    m = member(core, heard_ago=0.2 * TIMEOUT)
    m.leave()
    assert core.polls == []
    (deadline,) = core.leaves
    assert deadline == pytest.approx(m.heard_at + 0.5 * TIMEOUT)


def test_a_member_silent_for_over_half_the_timeout_polls_first_then_leaves() -> None:
    core = StubCore()
    m = member(core, heard_ago=0.55 * TIMEOUT)
    m.leave()
    (poll_timeout,) = core.polls
    assert poll_timeout is not None and poll_timeout <= 0.1 * TIMEOUT + 0.01  # lands in time
    (deadline,) = core.leaves
    assert deadline is not None and deadline > time.monotonic() + 0.4 * TIMEOUT


def test_a_member_whose_last_poll_fails_leaves_it_to_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = StubCore(poll_error=NotGroupMemberError("consumer is not a member"))
    with caplog.at_level(logging.INFO, logger="liftbridge_sync.consumer"):
        member(core, heard_ago=0.55 * TIMEOUT).leave()
    assert len(core.polls) == 1
    assert core.leaves == []
    assert any("not leaving the group" in r.getMessage() for r in caplog.records)


def test_a_member_the_server_may_be_expiring_neither_polls_nor_leaves() -> None:
    core = StubCore()
    member(core, heard_ago=0.7 * TIMEOUT).leave()
    assert core.polls == [] and core.leaves == []
