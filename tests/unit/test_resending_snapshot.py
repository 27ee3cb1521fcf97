"""Re-sending a silent partition's publishes while acks of others keep arriving.

The publisher thread picks the silent partition's entries under the send lock, but the
threads that settle acks remove entries from the same dict without it. A pick that
walked the dict itself raised "dictionary changed size during iteration" when an ack
landed mid-walk, and that killed the publisher thread: every pending publish failed
with ``InternalThreadError`` and the client refused all later ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from liftbridge_sync import ClientOptions
from liftbridge_sync._publishing.failover import ProbeResult
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._transport.core import ClientCore

SILENT = ("orders", 0)


class _Entry:
    """A pending publish; ``on_look`` runs when the pick looks at it (an ack landing)."""

    def __init__(self, key: tuple[str, int], on_look: Callable[[], object] = lambda: None) -> None:
        self.wants_ack = True
        self.correlation_id = f"id-{id(self)}"
        self.framed = b""
        self._key = key
        self._on_look = on_look

    def sent_at(self) -> float:
        self._on_look()
        return 0.0

    def partition_key(self) -> tuple[str, int]:
        return self._key


class _Table:
    """The pending table as the resender sees it: the entries and ``send_again``."""

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        self.live = None  # no stream: nothing re-sent on one is watched
        self.sent: list[_Entry] = []

    def send_again(self, pick: Callable[[], list[_Entry]]) -> int:
        self.sent = pick()  # under the send lock, in the real table
        return len(self.sent)


def test_an_ack_settled_while_silent_publishes_are_picked_does_not_break_the_pick() -> None:
    table = _Table()
    # Entry "a" is looked at first; as it is, the I/O thread settles the ack of "b"
    # (another partition) and removes it from the dict.
    table.entries["a"] = _Entry(SILENT, on_look=lambda: table.entries.pop("b", None))
    table.entries["b"] = _Entry(("orders", 1))
    table.entries["c"] = _Entry(SILENT)
    core = ClientCore(ClientOptions(addresses=("127.0.0.1:1",), resend_after=1.0))
    resender = Resender(core, cast(Any, table), lambda event: None, clock=lambda: 10.0)
    resender.on_probe_result(
        ProbeResult(key=SILENT, started=5.0, idle=True, trouble=True, detail="idle leader")
    )
    assert [e.partition_key() for e in table.sent] == [SILENT, SILENT]
    assert resender.resent_after_stall == 2
