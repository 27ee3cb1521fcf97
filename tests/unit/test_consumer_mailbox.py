"""The consumer's mailbox: what its partition readers queue, handed out in order."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from liftbridge_sync.consumer._mailbox import Mailbox
from liftbridge_sync.errors import BrokerUnavailableError
from liftbridge_sync.models import Message
from tests.messages import make_message


@dataclasses.dataclass
class _Reader:
    """What the mailbox asks of a partition reader."""

    stopped: bool = False


def _message(offset: int) -> Message:
    return make_message(offset, b"%d" % offset)


def _taken(mailbox: Mailbox, most: int, timeout: float | None) -> list[tuple[Any, Message]]:
    """Up to ``most`` messages, taken off the mailbox as the consumer takes them."""
    taken = mailbox.peek(most, timeout)
    mailbox.drop(taken)
    return taken


def _queued(mailbox: Mailbox, reader: _Reader, offsets: range) -> None:
    for offset in offsets:
        assert mailbox.put(reader, _message(offset))  # type: ignore[arg-type]


def test_taking_takes_what_is_queued_up_to_the_limit_in_order() -> None:
    mailbox = Mailbox(100)
    live, gone = _Reader(), _Reader()
    _queued(mailbox, live, range(3))
    _queued(mailbox, gone, range(100, 102))
    _queued(mailbox, live, range(3, 6))
    gone.stopped = True  # its partition was taken away meanwhile: never handed out
    first = _taken(mailbox, 2, 1.0)
    assert [(id(r), m.offset) for r, m in first] == [(id(live), 0), (id(live), 1)]
    rest = _taken(mailbox, 10, 1.0)
    assert [m.offset for _, m in rest] == [2, 3, 4, 5]
    with pytest.raises(TimeoutError):
        _taken(mailbox, 10, 0.05)


def test_taking_frees_room_for_a_full_mailbox() -> None:
    mailbox = Mailbox(3)
    reader = _Reader()
    _queued(mailbox, reader, range(3))
    assert [m.offset for _, m in _taken(mailbox, 3, 1.0)] == [0, 1, 2]
    _queued(mailbox, reader, range(3, 6))  # would block if the room were not given back


def test_taking_after_close_or_failure() -> None:
    failed = Mailbox(10)
    _queued(failed, _Reader(), range(1))
    failed.fail(LookupError("dropped"))
    assert [m.offset for _, m in _taken(failed, 5, 1.0)] == [0]  # queued ones first
    with pytest.raises(LookupError):
        _taken(failed, 5, 1.0)
    closed = Mailbox(10)
    closed.close()
    with pytest.raises(StopIteration):
        _taken(closed, 5, 1.0)


def _depth(error: BaseException) -> int:
    depth, tb = 0, error.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    return depth


def test_a_failure_raised_again_at_every_read_keeps_its_traceback_short() -> None:
    # Every get() after a failure raises the same error object; raised as it was, its
    # traceback gained the get's frames each time (a loop retrying next() grew it
    # without end), and the reader thread's own frames were buried under them.
    mailbox = Mailbox(10)
    try:
        raise BrokerUnavailableError("reader failed")
    except BrokerUnavailableError as exc:
        failure = exc
    at_failure = _depth(failure)
    mailbox.fail(failure)
    depths = []
    for _ in range(50):
        with pytest.raises(BrokerUnavailableError) as raised:
            _taken(mailbox, 1, 1.0)
        assert raised.value is failure
        depths.append(_depth(raised.value))
    assert depths[0] > at_failure  # raised from get(), on top of where it failed
    assert depths == [depths[0]] * 50
