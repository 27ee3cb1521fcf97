"""A publish's ack timeout counts from when it is entered (and sent), not from when its
batch was framed: the part of a ``publish_batch`` (or a ``publish`` caller) that waited
for a free slot (``max_in_flight``) gets its whole timeout too.

A keyed batch of 100,000 through the default window with ``timeout=1.0`` used to get
~40,000 ``AckTimeoutError`` outcomes at once, for messages sent and acknowledged within
milliseconds: their deadline had passed before they were sent.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from liftbridge_sync._publishing import batches
from liftbridge_sync._publishing.batches import Batches
from liftbridge_sync._publishing.pending import Entry, FailureLedger, new_entry
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._wire.publish_codec import encode_publish
from liftbridge_sync.errors import AckTimeoutError
from liftbridge_sync.models import AckPolicy


def _framed(correlation_id: str) -> bytes:
    return encode_publish(
        "orders",
        b"v",
        partition=0,
        key=b"k",
        headers=None,
        ack_policy=AckPolicy.LEADER,
        expected_offset=None,
        correlation_id=correlation_id,
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_what_waited_for_a_slot_gets_its_whole_timeout_from_when_it_is_entered() -> None:
    clock = _Clock()
    ledger = FailureLedger()
    table = PendingTable(
        max_in_flight=1,
        max_message=1 << 20,
        wake_owner=lambda event: None,
        ledger=ledger,
        clock=clock,
    )
    acked: list[str] = []

    def wait_for_space(line: bool, turn: object, again: bool) -> tuple[None, None]:
        # Ten seconds go by before the one publish in flight is acknowledged.
        clock.now += 10.0
        correlation_id, entry = next(iter(table.entries.items()))
        table.entries.pop(correlation_id)
        entry.future.set_result(None)
        acked.append(correlation_id)
        return None, None

    loop: Any = types.SimpleNamespace(started=True, closed_error=lambda: AssertionError())
    waiting: Any = types.SimpleNamespace(wait_for_space=wait_for_space)
    batches = Batches(table, loop, waiting, ledger)
    ids = [f"id-{i}" for i in range(3)]
    requests = [(_framed(i), i, 0, True) for i in ids]

    futures = batches.submit_many(requests, timeout=5.0)

    assert acked == ["id-0", "id-1"]  # the third is in flight, entered just now
    (entry,) = table.entries.values()
    assert entry.deadline == clock.now + 5.0
    timed_out, earliest = table.expire(clock.now + 4.9)
    assert timed_out == [] and earliest == clock.now + 5.0
    assert not futures[2].done()
    timed_out, _ = table.expire(clock.now + 5.0)
    assert [f for f, _, error in timed_out if isinstance(error, AckTimeoutError)] == [futures[2]]


def test_a_batch_that_took_long_to_build_gets_its_whole_timeout_from_when_it_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Building a large batch's entries takes a while (100,000 keyed items: over a second
    # on a loaded machine, past a timeout of 1 s): the first window, sent without waiting
    # for room, failed at once with AckTimeoutError too if its deadline was set before.
    clock = _Clock()
    ledger = FailureLedger()
    table = PendingTable(
        max_in_flight=1024,
        max_message=1 << 20,
        wake_owner=lambda event: None,
        ledger=ledger,
        clock=clock,
    )

    def slow_new_entry(*args: Any) -> Entry:
        clock.now += 0.01  # ten seconds for the thousand entries below
        return new_entry(*args)

    monkeypatch.setattr(batches, "new_entry", slow_new_entry)
    loop: Any = types.SimpleNamespace(started=True, closed_error=lambda: AssertionError())
    waiting: Any = types.SimpleNamespace()  # there is room for all: no wait
    ids = [f"id-{i}" for i in range(1000)]
    requests = [(_framed(i), i, 0, True) for i in ids]

    futures = Batches(table, loop, waiting, ledger).submit_many(requests, timeout=5.0)

    assert len(table.entries) == 1000
    assert {entry.deadline for entry in table.entries.values()} == {clock.now + 5.0}
    timed_out, earliest = table.expire(clock.now + 4.9)
    assert timed_out == [] and earliest == clock.now + 5.0
    assert not any(future.done() for future in futures)
