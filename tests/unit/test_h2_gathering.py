"""How many bytes of acks the publish I/O thread waits for (``SO_RCVLOWAT``)."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest

from liftbridge_sync._transport.h2.gathering import MOST_GATHERED, AckGathering
from liftbridge_sync._transport.h2.outbound_queue import PyOutboundQueue

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "SO_RCVLOWAT"), reason="no SO_RCVLOWAT on this platform"
)


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback TCP pair: (reader, writer)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        writer = socket.create_connection(server.getsockname())
        reader, _ = server.accept()
    with reader, writer:
        yield reader, writer


def _lowat(sock: socket.socket) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def _gathering(
    reader: socket.socket, due: int, delay: float | None = 0.001
) -> tuple[AckGathering, PyOutboundQueue]:
    """A gathering that has read one 100-byte ack and has ``due`` more due, and the
    outbound queue that counts the requests asked (the stream's)."""
    counts = PyOutboundQueue(16 * 1024)
    gathering = AckGathering(reader, delay, counts)
    gathering.answered(nbytes=100, responses=1)
    counts.asked = 1 + due
    return gathering, counts


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_nothing_gathered_before_the_size_of_an_ack_is_known(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    reader, _ = tcp_pair
    counts = PyOutboundQueue(16 * 1024)
    gathering = AckGathering(reader, 0.001, counts)
    counts.asked = 50
    assert gathering.plan(quiet=True) is None
    assert _lowat(reader) == 1


def test_waits_for_the_bytes_of_every_ack_due(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    reader, _ = tcp_pair
    counts = PyOutboundQueue(16 * 1024)
    gathering = AckGathering(reader, 0.002, counts)
    counts.asked = 100
    gathering.answered(nbytes=480, responses=4)  # 120 bytes each
    gathering.answered(nbytes=300, responses=3)  # 100 each: the smallest counts
    assert gathering.due == 93
    assert gathering.plan(quiet=True) == 0.002
    assert _lowat(reader) == 93 * 100


def test_the_mark_is_capped(tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    reader, _ = tcp_pair
    gathering, _ = _gathering(reader, due=99_999)
    gathering.plan(quiet=True)
    assert _lowat(reader) == MOST_GATHERED


@pytest.mark.parametrize(
    ("quiet", "asked", "direct_mark", "delay"),
    [
        (False, 50, 0, 0.001),  # unwritten requests or closing: window updates must wake
        (True, 1, 0, 0.001),  # one ack due: nothing to gather
        (True, 50, 50, 0.001),  # a publish() caller waits for its ack
        (True, 50, -1, None),  # ack_read_delay=None
    ],
)
def test_any_byte_wakes_the_reader_when(
    tcp_pair: tuple[socket.socket, socket.socket],
    quiet: bool,
    asked: int,
    direct_mark: int,
    delay: float | None,
) -> None:
    reader, _ = tcp_pair
    gathering, counts = _gathering(reader, due=50, delay=delay)
    gathering.plan(quiet=True)
    assert _lowat(reader) == (1 if delay is None else 50 * 100)
    counts.asked, counts.direct_mark = 1 + asked, 1 + direct_mark
    assert gathering.plan(quiet=quiet) is None
    assert _lowat(reader) == 1


def test_forgetting_overdue_answers_ends_the_wait(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    reader, _ = tcp_pair
    gathering, _ = _gathering(reader, due=40)
    assert gathering.plan(quiet=True) is not None
    gathering.forget()  # an ack timed out: its answer may never come
    assert gathering.due == 0
    assert gathering.plan(quiet=True) is None
    assert _lowat(reader) == 1


def test_the_kernel_holds_readiness_until_the_mark_and_release_lowers_it(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    # The mechanism itself, on this machine's kernel: below the mark the socket does
    # not poll readable (so the I/O thread sleeps on); release() makes it readable.
    reader, writer = tcp_pair
    gathering, _ = _gathering(reader, due=10)  # ten acks due: 1,000 bytes
    gathering.plan(quiet=True)
    writer.sendall(b"x" * 400)
    assert select.select([reader], [], [], 0.2)[0] == []
    gathering.release()
    assert _readable(reader)
    gathering.plan(quiet=True)  # the mark again (400 bytes are there, 1,000 wanted)
    assert not _readable(reader)
    writer.sendall(b"x" * 600)
    assert select.select([reader], [], [], 5.0)[0] == [reader]


def test_awaited_says_whether_publish_callers_wrote_since_the_answers_before(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    reader, _ = tcp_pair
    counts = PyOutboundQueue(16 * 1024)
    gathering = AckGathering(reader, 0.001, counts)
    counts.asked = 10  # publish_async requests only: nobody blocks on them
    gathering.answered(nbytes=500, responses=5)
    assert not gathering.awaited(5)
    counts.asked += 1
    counts.direct_mark = counts.asked  # a publish() caller wrote the 11th
    gathering.answered(nbytes=500, responses=5)  # the 6th to 10th
    assert gathering.awaited(5)
    gathering.answered(nbytes=100, responses=1)  # the 11th, its own
    assert gathering.awaited(1)
    counts.asked += 4  # publish_async again
    gathering.answered(nbytes=400, responses=4)  # answers after the caller's
    assert not gathering.awaited(4)
