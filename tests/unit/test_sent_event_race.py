"""An ``AckPolicy.NONE`` publish answered by a broker while its "sent" note is handled.

The owner thread settles an ``AckPolicy.NONE`` publish when the transport says it was
written. Threads that read acks pop entries from the same dict without a lock, and a
broker may answer even such a publish. A look-up followed by ``del`` raised
``KeyError`` when the answer's pop came in between, and that killed the publisher
thread: every pending publish then failed with ``InternalThreadError``.
"""

from __future__ import annotations

import queue
from typing import Any, cast

from liftbridge_sync import ClientOptions
from liftbridge_sync._publishing.futures import PublishFuture
from liftbridge_sync._publishing.owner import OwnerLoop
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.publish_stream import StreamSent


class _Entry:
    def __init__(self) -> None:
        self.wants_ack = False
        self.correlation_id = "id-1"
        self.future: PublishFuture[object] = PublishFuture()


class _AnsweredOnLookup(dict[str, _Entry]):
    """The entries dict, whose look-up lets a reading thread's pop in right after."""

    def get(self, key: str, default: Any = None) -> Any:
        found = super().get(key, default)
        super().pop(key, None)  # the ack reader's pop, between the look-up and ours
        return found


class _Table:
    def __init__(self) -> None:
        self.entries = _AnsweredOnLookup()


def _owner(table: _Table, woken: list[int]) -> OwnerLoop:
    core = ClientCore(ClientOptions(addresses=("127.0.0.1:1",)))
    none = cast(Any, None)
    return OwnerLoop(
        core,
        cast(Any, table),
        none,
        none,
        none,
        queue.SimpleQueue(),
        lambda: woken.append(1),
    )


def test_a_sent_note_for_an_entry_popped_meanwhile_is_ignored() -> None:
    table = _Table()
    entry = _Entry()
    table.entries[entry.correlation_id] = entry
    woken: list[int] = []
    owner = _owner(table, woken)
    owner._handle(StreamSent(0, entry.correlation_id))  # raised KeyError before
    assert not table.entries
    assert not entry.future.done()  # the thread that popped it settles it, not us
    assert woken == []


def test_a_sent_note_settles_an_entry_nobody_else_took() -> None:
    table = _Table()
    entry = _Entry()
    dict.__setitem__(table.entries, entry.correlation_id, entry)
    table.entries.get = dict.get.__get__(table.entries)  # type: ignore[method-assign]
    woken: list[int] = []
    owner = _owner(table, woken)
    owner._handle(StreamSent(0, entry.correlation_id))
    assert not table.entries
    assert entry.future.done() and entry.future.result() is None
    assert woken == [1]
