"""A ``publish()`` caller reading its own ack off the publish connection.

The I/O thread reads every response and hands it over, so a ``publish()`` caller
waiting for its ack is woken by another thread: one more wake-up, and the hop's
latency, per call. Instead, a caller whose request just went out takes over reading
while it waits (:meth:`CallerReads.answer_here`): the socket leaves the I/O thread's
selector, the caller polls it, reads and hands over whatever arrives (its own ack and
anybody else's, in order), and gives the socket back once its ack is in or after
``READ_HERE_FOR``. Only one caller reads at a time, only when its ack is the only
one due (never for a publish without an ack), and only while no other ``publish()``
caller waits (:meth:`~liftbridge_sync._publishing.waiting.Waiting.wait` decides): a
caller reading for the others woke them one at a time, each then wrote its next
request alone and the broker answered each alone, where the I/O thread hands their
acks over together and they write together (combining, :mod:`.writing`; with eight
threads calling ``publish()`` that was a third more messages a second and a third less
of the broker's CPU, bench/HISTORY.md 2026-11-26 16:00). Whoever hands several acks
over starts the combining, this caller too. The I/O lock
still guards every socket and h2 operation, and it is held only while reading, not
while polling, so other callers keep writing their requests themselves meanwhile.

What the I/O thread would have noticed while the caller read is not lost: a window
the broker opened is used at once (the caller frames what waited for it), a broken
connection or the stream's end wakes the I/O thread, which ends the stream as it
would have, and output the socket could not take is watched for again when the
socket goes back.
"""

from __future__ import annotations

import select
import selectors
import threading
import time
from collections.abc import Callable

from liftbridge_sync._transport.h2.responses import ResponseReader
from liftbridge_sync._transport.h2.sockets import ConnectionLost
from liftbridge_sync._transport.h2.writing import QueuedWrites
from liftbridge_sync._wire.publish_codec import Answer

__all__ = ["READ_HERE_FOR", "CallerReads"]

#: The longest a ``publish()`` caller reads for its ack before it leaves reading to the
#: I/O thread and waits (an ack usually takes a few hundred microseconds).
READ_HERE_FOR = 0.005


class CallerReads(QueuedWrites):
    """Reading on a ``publish()`` caller's thread (see the module). Thread-safe as
    :class:`~.connection.H2PublishStream`, whose I/O thread yields the socket to one
    caller at a time."""

    # Whoever holds _io_lock.
    _reader: ResponseReader
    _arrived: list[Answer]
    _more_to_read: bool  # the last read stopped at its bound (see connection._read)
    #: A caller reads the socket; the I/O thread's selector does not watch it.
    _reading_here: bool
    #: What went wrong while a caller read: the I/O thread ends the stream with it.
    _failed_here: BaseException | None
    _here_poll: select.poll | None
    _hand_over_lock: threading.Lock
    #: A graceful GOAWAY was passed on to the publisher.
    _drain_told: bool

    def _read(self) -> None:
        """Read what the socket has (the connection's; see there)."""
        raise NotImplementedError

    def _take_arrived(self) -> list[Answer]:
        raise NotImplementedError

    def _hand_over(self, responses: list[Answer], on_io_thread: bool = True) -> None:
        raise NotImplementedError

    def answer_here(self, done: Callable[[], bool]) -> None:
        """Read the connection on the calling thread until ``done()`` or for at most
        ``READ_HERE_FOR`` seconds, handing over what arrives. Returns at once if the
        I/O thread is busy, another caller reads, other acks are due, or anything is
        left to write."""
        io_lock = self._io_lock
        if self._here_poll is None or not io_lock.acquire(blocking=False):
            return
        try:
            if (
                self._out.done
                or self._closing
                or self._reading_here
                or self._want_write
                or self._unsent_pos != len(self._unsent)
                or self._reader.ended
                or self._failed_here is not None
                or self._gathering.due != 1  # exactly the caller's ack
            ):
                return
            self._selector.unregister(self._sock)
            self._reading_here = True
            self._gathering.release()  # any byte wakes this caller
        finally:
            io_lock.release()
        stop = False
        try:
            stop = self._read_until(done, time.monotonic() + READ_HERE_FOR)
        finally:
            with io_lock:
                self._reading_here = False
                if not self._out.done:
                    events = selectors.EVENT_READ
                    if self._want_write:
                        events |= selectors.EVENT_WRITE
                    self._selector.register(self._sock, events)
                    if stop or self._failed_here is not None:
                        self._wake_unless_woken()

    def _read_until(self, done: Callable[[], bool], deadline: float) -> bool:
        """The caller's reading loop; True when the I/O thread must take over at once
        (the connection broke or the stream ended)."""
        io_lock = self._io_lock
        assert self._here_poll is not None
        poll = self._here_poll.poll
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not self._more_to_read and not poll(remaining * 1000.0):
                continue
            with io_lock:
                if self._out.done:  # the socket is closed (its number may be reused)
                    return False
                try:
                    self._read()
                    self._pump()  # a window the broker opened: what waited for it
                    self._write_out()
                except Exception as exc:  # the I/O thread ends the stream with it
                    self._failed_here = exc
                    stop = True
                except BaseException:  # interrupted halfway: the connection's state is lost
                    self._failed_here = ConnectionLost("reading was interrupted")
                    raise
                else:
                    # The stream's end, or a graceful GOAWAY to pass on, is the I/O
                    # thread's to act on.
                    stop = self._reader.ended or (self._reader.draining and not self._drain_told)
                arrived = self._take_arrived()
            if arrived:
                self._hand_over(arrived, on_io_thread=False)
            if stop:
                return True
            if self._gathering.due <= 0:
                # The caller's answer is in, though not resolved here (a refusal goes
                # to the publisher thread): waiting on for more would only delay it.
                return False
        return False
