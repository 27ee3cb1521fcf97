"""Re-sending what an overtaking ack proves lost, and nothing more.

A probed partition whose leader acknowledged a publish sent after its silent ones, while
they still waited, lost them: a leader answers in the order it receives. But an ack that
came in its turn, after every silent publish had been acknowledged, proves nothing, and
publishes sent after the silent ones are not proven lost by it either. On a loaded
machine (CI) the resender took such an ack for proof and re-sent the publishes sent in
the last second before the probe, whose acks were merely slow: each was stored twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, cast

from liftbridge_sync import ClientOptions
from liftbridge_sync._publishing.failover import ProbeResult
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.publish_codec import head, py_frame_value
from liftbridge_sync.models import AckPolicy

KEY = ("orders", 0)
_SEQ = itertools.count(1)


class _Entry:
    """A pending publish of ``KEY``, sent at ``sent``."""

    def __init__(self, sent: float) -> None:
        self.seq = next(_SEQ)
        self.wants_ack = True
        self.correlation_id = f"id-{self.seq}"
        self.framed = py_frame_value(
            head(KEY[0], KEY[1], AckPolicy.LEADER), b"v", self.correlation_id.encode()
        )
        self._sent = sent

    def sent_at(self) -> float:
        return self._sent

    def partition_key(self) -> tuple[str, int]:
        return KEY


class _Answer:
    def __init__(self, entry: _Entry, stream: str) -> None:
        self.correlation_id = entry.correlation_id
        self.stream = stream


def _answers(*acked: _Entry, stream: str = KEY[0]) -> Any:
    """Acks (as the resender reads them: their correlation ids and streams) of
    ``acked``, from ``stream``."""
    return [_Answer(e, stream) for e in acked]


class _Table:
    """The pending table as the resender sees it: the entries and ``send_again``."""

    def __init__(self, entries: list[_Entry]) -> None:
        self.entries = {e.correlation_id: e for e in entries}
        self.live = None
        self.sent: list[_Entry] = []

    def send_again(self, pick: Callable[[], list[_Entry]]) -> int:
        self.sent = pick()
        return len(self.sent)

    def settle(self, *acked: _Entry) -> None:
        for entry in acked:
            del self.entries[entry.correlation_id]


def _resender(table: _Table) -> Resender:
    core = ClientCore(ClientOptions(addresses=("127.0.0.1:1",), resend_after=1.0))
    resender = Resender(core, cast(Any, table), lambda event: None, clock=lambda: 10.0)
    return resender


def _watched(resender: Resender, *silent: _Entry) -> None:
    """What a probe's start leaves (see ``watch_stalls``): the last silent sequence."""
    resender.watching = {KEY: max(e.seq for e in silent)}


def _log_moved_but_committed() -> ProbeResult:
    return ProbeResult(
        key=KEY,
        started=10.0,
        idle=False,
        trouble=False,
        detail="the log moved",
        leader="a",
        known_leader="a",
        committed=True,
    )


def test_an_ack_in_its_turn_after_the_silent_ones_re_sends_nothing() -> None:
    silent = [_Entry(sent=0.0), _Entry(sent=0.0)]
    later, slow = _Entry(sent=9.5), _Entry(sent=9.6)  # within resend_after of the probe
    table = _Table([*silent, later, slow])
    resender = _resender(table)
    _watched(resender, *silent)
    # The silent ones' acks come (late), then the next publish's, in order.
    resender.saw_answers(_answers(*silent), cast(Any, table.entries))
    table.settle(*silent)
    resender.saw_answers(_answers(later), cast(Any, table.entries))
    table.settle(later)
    resender.on_probe_result(_log_moved_but_committed())
    assert table.sent == []
    assert resender.resent_after_stall == 0


def test_an_ack_overtaking_a_silent_publish_re_sends_that_one_only() -> None:
    lost, acked = _Entry(sent=0.0), _Entry(sent=0.0)
    later, slow = _Entry(sent=9.5), _Entry(sent=9.6)
    table = _Table([lost, acked, later, slow])
    resender = _resender(table)
    _watched(resender, lost, acked)
    resender.saw_answers(_answers(acked, later), cast(Any, table.entries))
    table.settle(acked, later)
    resender.on_probe_result(_log_moved_but_committed())
    assert table.sent == [lost]  # not ``slow``: nothing proves it lost
    assert resender.resent_after_stall == 1


def test_another_streams_ack_overtaking_a_silent_publish_proves_nothing() -> None:
    # Streams sharing the subject answer every publish: their acks say nothing of the
    # order this partition's leader keeps.
    silent, later = _Entry(sent=0.0), _Entry(sent=9.5)
    table = _Table([silent, later])
    resender = _resender(table)
    _watched(resender, silent)
    resender.saw_answers(_answers(later, stream="other"), cast(Any, table.entries))
    resender.on_probe_result(_log_moved_but_committed())
    assert table.sent == []
    assert resender.resent_after_stall == 0


def test_an_idle_leader_still_proves_every_publish_sent_before_the_probe_lost() -> None:
    # The idle proof is unchanged: a leader idle and committed took none of them.
    lost, later = _Entry(sent=0.0), _Entry(sent=9.5)
    table = _Table([lost, later])
    resender = _resender(table)
    _watched(resender, lost)
    resender.saw_answers([], cast(Any, table.entries))
    resender.on_probe_result(
        ProbeResult(key=KEY, started=10.0, idle=True, trouble=True, detail="idle leader")
    )
    assert table.sent == [lost, later]


def test_a_past_silence_does_not_prove_the_next_one() -> None:
    # An idle leader proved one silence; everything was then answered. A publish that
    # is slow later (a loaded machine) must wait out IDLE_PROOF again: the first
    # silence's "idle since" made its first idle probe proof enough, and re-sent it.
    now = [0.0]
    first = _Entry(sent=0.0)
    table = _Table([first])
    core = ClientCore(ClientOptions(addresses=("127.0.0.1:1",), resend_after=1.0))
    resender = Resender(core, cast(Any, table), lambda event: None, clock=lambda: now[0])

    def idle_probe(started: float) -> None:
        now[0] = started + 0.2  # the probe's two looks
        resender.on_probe_result(
            ProbeResult(key=KEY, started=started, idle=True, trouble=False, detail="idle")
        )

    idle_probe(started=3.0)
    idle_probe(started=6.5)  # idle for 3.5 s: proof
    assert table.sent == [first]
    table.settle(first)
    resender.watch_stalls(30.0, connected=True)  # nothing pending: nothing silent
    slow = _Entry(sent=58.0)
    table.entries[slow.correlation_id] = slow
    table.sent = []
    idle_probe(started=60.0)  # its first idle probe
    assert table.sent == []
    assert resender.resent_after_stall == 1
