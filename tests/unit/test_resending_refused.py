"""Publishes the server refused for now go again once there is a stream to send them on.

Refused publishes are re-sent after a back-off. When that back-off ends between two
streams (the old one draining, the next not open yet), nothing can be sent; the next
stream re-sends what is pending, but not what a draining stream still holds. A refused
publish held there used to be dropped from the resender's list and wait for the draining
stream's end, or its own deadline; it now waits for the next stream only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, cast

from liftbridge_sync import ClientOptions
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._transport.core import ClientCore

_SEQ = itertools.count(1)


class _Entry:
    def __init__(self) -> None:
        self.seq = next(_SEQ)
        self.wants_ack = True
        self.correlation_id = f"id-{self.seq}"
        self.resent_at = 0.0

    def partition_key(self) -> tuple[str, int]:
        return ("orders", 0)


class _Table:
    """The pending table as the resender sees it; ``send_again`` as the real one: nothing
    without a live stream, ``pick()`` under its lock otherwise."""

    def __init__(self, entries: list[_Entry]) -> None:
        self.entries = {e.correlation_id: e for e in entries}
        self.live: object | None = None
        self.sent: list[_Entry] = []

    def send_again(self, pick: Callable[[], list[_Entry]]) -> int:
        if self.live is None:
            return 0
        picked = pick()
        for entry in picked:
            entry.resent_at += 1.0
        self.sent += picked
        return len(picked)


def _resender(table: _Table, now: list[float]) -> Resender:
    core = ClientCore(ClientOptions(addresses=("127.0.0.1:1",)))
    return Resender(core, cast(Any, table), lambda event: None, clock=lambda: now[0])


def test_a_refusal_due_between_streams_goes_on_the_next_stream() -> None:
    kept, answered, resent = _Entry(), _Entry(), _Entry()
    table = _Table([kept, answered, resent])
    now = [10.0]
    resender = _resender(table, now)
    for entry in (kept, answered, resent):
        resender.refused(cast(Any, entry))
    resender.answers_handled()
    first = resender.resend_refused_at
    assert first is not None and first > now[0]

    now[0] = first
    resender.resend_refused()  # no live stream: nothing can go
    assert table.sent == []
    again = resender.resend_refused_at
    assert again is not None and again > now[0]  # kept, with a back-off

    del table.entries[answered.correlation_id]  # its ack came meanwhile
    resent.resent_at = 5.0  # sent again since (a new stream's re-send): it answers itself
    table.live = object()
    now[0] = again
    resender.resend_refused()
    assert table.sent == [kept]
    assert resender.resent_after_refusal == 1
    assert resender.resend_refused_at is None  # nothing left to send


def test_nothing_is_kept_between_streams_once_no_refused_publish_is_pending() -> None:
    gone = _Entry()
    table = _Table([gone])
    now = [10.0]
    resender = _resender(table, now)
    resender.refused(cast(Any, gone))
    resender.answers_handled()
    del table.entries[gone.correlation_id]
    resender.resend_refused()
    assert resender.resend_refused_at is None
    table.live = object()
    resender.resend_refused()
    assert table.sent == []
