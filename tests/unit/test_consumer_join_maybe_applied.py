"""A join that failed after the server may have applied it leaves the group.

A server that timed out internally (its forward of the join to the metadata leader, or
the Raft apply, ran out of its context) answers INTERNAL "... context deadline
exceeded": the join may have been applied all the same, and the member would stay in
the group, holding partitions nobody reads and its id refused, until the server's
consumer timeout. It was taken for a refusal, and nothing left the group.
"""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_sync import ClientOptions
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.status import maybe_carried_out
from liftbridge_sync.consumer._joining import join_group
from liftbridge_sync.errors import LiftbridgeError, ServerError

_TIMED_OUT = "failed to join consumer group: context deadline exceeded"


class StubCore:
    """The join fails with ``error`` (after the call's ``failed`` list got it, as
    ``ClientCore.call_any`` does); the leaves are recorded."""

    def __init__(self, error: LiftbridgeError) -> None:
        self.options = ClientOptions(addresses=("127.0.0.1:1",))
        self.error = error
        self.leaves: list[str] = []

    def call_any(self, rpc: Any, request: Any, **kwargs: Any) -> Any:
        if rpc.name == "LeaveConsumerGroup":
            self.leaves.append(request.consumerId)
            return api_pb2.LeaveConsumerGroupResponse()
        assert rpc.name == "JoinConsumerGroup"
        failed = kwargs.get("failed")
        if failed is not None:
            failed.append(self.error)
        raise self.error


def _internal(details: str) -> ServerError:
    return ServerError(f"consumer group: {details}", code="INTERNAL", details=details)


@pytest.mark.parametrize("code", ["INTERNAL", "UNKNOWN"])
def test_a_server_side_deadline_may_have_been_carried_out(code: str) -> None:
    error = ServerError(f"consumer group: {_TIMED_OUT}", code=code, details=_TIMED_OUT)
    assert maybe_carried_out([error]) is error


def test_other_internal_errors_were_not_carried_out() -> None:
    assert maybe_carried_out([_internal("cursors stream does not exist")]) is None


def test_a_join_the_server_timed_out_on_leaves_the_group() -> None:
    core = StubCore(_internal(_TIMED_OUT))
    with pytest.raises(ServerError):
        join_group(core, "g", "m1", ["s"])  # type: ignore[arg-type]
    assert core.leaves == ["m1"]


def test_a_join_refused_otherwise_does_not_leave() -> None:
    core = StubCore(_internal("something else went wrong"))
    with pytest.raises(ServerError):
        join_group(core, "g", "m1", ["s"])  # type: ignore[arg-type]
    assert core.leaves == []
