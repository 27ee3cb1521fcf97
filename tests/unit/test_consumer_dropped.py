"""Where a consumer dropped without close() waits to be closed (consumer/_dropped.py)."""

from __future__ import annotations

import logging
import types

import pytest

from liftbridge_sync.consumer._dropped import Dropped


class Member:
    """A consumer as :class:`Dropped` sees it; counts its close() calls."""

    def __init__(self, closed: bool) -> None:
        self.closed = closed
        self.closes = 0
        self._core = types.SimpleNamespace(register=lambda member: None)
        self._who = "g/m"

    def close(self) -> None:
        self.closes += 1
        self.closed = True


@pytest.fixture(params=["client", "heartbeat"])
def by(request: pytest.FixtureRequest) -> str:
    """Who takes a dropped consumer over: Client.close() or the heartbeat's tending."""
    return str(request.param)


def _hand_over(member: Member, caplog: pytest.LogCaptureFixture, by: str) -> Dropped:
    """Puts ``member`` in a new :class:`Dropped` and lets ``by`` take it over, its
    warnings captured; gives the :class:`Dropped`."""
    dropped = Dropped()
    dropped.put(member)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="liftbridge_sync.consumer"):
        dropped.close() if by == "client" else dropped.tend()
    return dropped


def test_a_dropped_consumer_the_client_closed_already_is_not_closed_again(
    caplog: pytest.LogCaptureFixture, by: str
) -> None:
    # Collected by reference counting, a consumer is still held by the client's weak
    # set when its __del__ hands it over: Client.close() may close it first, and the
    # handover then warned "dropped without close(): closing" for a closed consumer.
    member = Member(closed=True)
    _hand_over(member, caplog, by)
    assert member.closes == 0
    assert caplog.records == []


def test_a_dropped_consumer_is_closed_with_a_warning(
    caplog: pytest.LogCaptureFixture, by: str
) -> None:
    member = Member(closed=False)
    dropped = _hand_over(member, caplog, by)
    dropped.close()  # taken once
    assert member.closes == 1
    assert "g/m: dropped without close(): closing" in caplog.text
