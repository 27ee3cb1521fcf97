"""A ``publish()`` caller reading its own ack off the publish connection.

The I/O thread reads every response and hands it over, so a ``publish()`` caller
waiting for its ack is woken by another thread: one more wake-up, and the hop's
latency, per call. Instead, a caller whose request just went out takes over reading
while it waits (:meth:`CallerReads.answer_here`; the stream composes one): the socket
leaves the I/O thread's selector, the caller polls it, reads and hands over whatever
arrives (its own ack and anybody else's, in order), and gives the socket back once its
ack is in or after ``READ_HERE_FOR``. Only one caller reads at a time, only when its
ack is the only one due (never for a publish without an ack), and only while no other
``publish()`` caller waits (:meth:`~liftbridge_sync._publishing.waiting.Waiting.wait`
decides): a caller reading for the others woke them one at a time, each then wrote its
next request alone and the broker answered each alone, where the I/O thread hands their
acks over together and they write together (combining, :mod:`.writing`; with eight
threads calling ``publish()`` that was a third more messages a second and a third less
of the broker's CPU, bench/HISTORY.md 2026-11-26 16:00). Whoever hands several acks
over starts the combining, this caller too. The I/O lock still guards every socket and
h2 operation, and it is held only while reading, not while polling, so other callers
keep writing their requests themselves meanwhile.

What the I/O thread would have noticed while the caller read is not lost: a window
the broker opened is used at once (the caller frames what waited for it), a broken
connection or the stream's end wakes the I/O thread, which ends the stream as it
would have, and output the socket could not take is watched for again when the
socket goes back.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable

from liftbridge_sync._transport.h2.gathering import AckGathering
from liftbridge_sync._transport.h2.outbound_queue import OutboundQueueType
from liftbridge_sync._transport.h2.responses import ResponseReader
from liftbridge_sync._transport.h2.sockets import ConnectionLost
from liftbridge_sync._transport.h2.writing import SocketWatch, Writer
from liftbridge_sync._wire.publish_codec import Answer

__all__ = ["READ_HERE_FOR", "CallerReads"]

#: The longest a ``publish()`` caller reads for its ack before it leaves reading to the
#: I/O thread and waits (an ack usually takes a few hundred microseconds).
READ_HERE_FOR = 0.005


def _nothing_read() -> None:
    """The read of a stream that has finished (see :meth:`CallerReads.finished`)."""


def _nothing_untold() -> bool:
    return False


def _nothing_arrived() -> list[Answer]:
    return []


def _nothing_handed_over(responses: list[Answer], on_io_thread: bool) -> None:
    """Never called: nothing arrives once the stream has finished."""


class CallerReads:
    """Reading on a ``publish()`` caller's thread (see the module), for one publish
    stream, which composes it and gives it what it works with.

    Args:
        sock: The stream's socket (polled by the reading caller).
        io_lock: The stream's I/O lock (socket and h2 work).
        out: The stream's outbound queue (``done``: the socket is closed).
        writer: The stream's writer (what a window the broker opened lets out).
        watch: What the I/O thread's selector watches the socket for: the caller
            takes the socket off it while it reads (``reading_here``), and gives it
            back.
        gathering: The low-water mark of the socket's reads (the acks due).
        reader: The stream's response reader (``ended``, ``draining``).
        read: Reads what the socket has, as the I/O thread would (under ``io_lock``).
        draining_untold: Under ``io_lock``, while ``reader`` drains: whether the I/O
            thread has still to pass the graceful GOAWAY on.
        take_arrived: Under ``io_lock``: the responses read so far, with the hand-over
            lock taken when there are any.
        hand_over: Emits those responses (outside ``io_lock``; ``False``: not on the
            I/O thread) and releases the hand-over lock.

    Thread-safe as the stream: its I/O thread yields the socket to one caller at a time,
    and everything here but ``poll()`` runs under ``io_lock``.
    """

    def __init__(
        self,
        sock: socket.socket,
        io_lock: threading.Lock,
        out: OutboundQueueType,
        writer: Writer,
        watch: SocketWatch,
        gathering: AckGathering,
        reader: ResponseReader,
        *,
        read: Callable[[], None],
        draining_untold: Callable[[], bool],
        take_arrived: Callable[[], list[Answer]],
        hand_over: Callable[[list[Answer], bool], None],
    ) -> None:
        self._sock = sock
        self._io_lock = io_lock
        self._out = out
        self._writer = writer
        self._watch = watch
        self._gathering = gathering
        self._reader = reader
        self._read = read
        self._draining_untold = draining_untold
        self._take_arrived = take_arrived
        self._hand_over = hand_over
        #: Held by the caller reading the socket, from before it takes the socket off
        #: the selector until after it gives it back: free while ``reading_here`` is set
        #: means the caller was interrupted on the way (see :meth:`take_back_if_left`).
        self._reading = threading.Lock()
        #: What went wrong while a caller read: the I/O thread ends the stream with it.
        #: Under the I/O lock.
        self.failed_here: BaseException | None = None
        #: How a reading caller waits for the socket (``None``: no ``poll()`` on this
        #: platform, so callers never read).
        self._here_poll: select.poll | None = None
        if hasattr(select, "poll"):
            self._here_poll = select.poll()
            self._here_poll.register(sock.fileno(), select.POLLIN)

    def finished(self) -> None:
        """Under the I/O lock, once the stream has finished (``done`` set): drop the
        collaborators that refer back to the stream, so that it is freed by reference
        counting once nobody holds it (no cycle to collect). A caller calls them only
        under the I/O lock after seeing ``done`` unset, or hands over what it took so
        (with the ones it bound before)."""
        self._read = _nothing_read
        self._draining_untold = _nothing_untold
        self._take_arrived = _nothing_arrived
        self._hand_over = _nothing_handed_over

    def answer_here(self, done: Callable[[], bool]) -> None:
        """Read the connection on the calling thread until ``done()`` or for at most
        ``READ_HERE_FOR`` seconds, handing over what arrives. Returns at once if the
        I/O thread is busy, another caller reads, other acks are due, or anything is
        left to write.

        Interrupted anywhere (Ctrl-C raises ``KeyboardInterrupt`` at whatever call the
        main thread makes), the socket still goes back to the I/O thread's selector:
        here if the caller gets that far, otherwise by whoever next finds
        ``reading_here`` set with nobody reading (:meth:`take_back_if_left`: the I/O
        thread on its next turn, which this caller wakes, or the next caller). Before,
        an interruption while taking the I/O lock back left the socket unwatched: acks
        waited for the stall watch (about 5 s), then were sent again."""
        if self._here_poll is None:
            return
        reading = self._reading
        watch = self._watch
        if not reading.acquire(blocking=False):
            return
        try:
            io_lock = self._io_lock
            if not io_lock.acquire(blocking=False):
                return
            try:
                writer = self._writer
                if watch.reading_here:
                    self._take_back()  # a caller interrupted before it gave it back
                if (
                    self._out.done
                    or writer.closing
                    or watch.reading_here
                    or watch.want_write
                    or writer.unsent_pos != len(writer.unsent)
                    or self._reader.ended
                    or self.failed_here is not None
                    or writer.failed_here is not None
                    or self._gathering.due != 1  # exactly the caller's ack
                ):
                    return
                if not watch.lend():
                    self.failed_here = ConnectionLost("the socket's watch was lost")
                    return
                self._gathering.release()  # any byte wakes this caller
            finally:
                io_lock.release()
            stop = False
            try:
                stop = self._read_until(done, time.monotonic() + READ_HERE_FOR)
            finally:
                with io_lock:
                    self._take_back(stop)
        finally:
            reading.release()
            if watch.reading_here:  # not given back (interrupted): the I/O thread does
                self._writer.wake_unless_woken()

    def take_back_if_left(self) -> None:
        """Under the I/O lock, with ``reading_here`` set: give the socket back to the
        selector unless a caller is reading it (one interrupted before it did)."""
        reading = self._reading
        if reading.acquire(blocking=False):
            try:
                self._take_back()
            finally:
                reading.release()

    def _take_back(self, stop: bool = False) -> None:
        """Under the I/O lock: the socket back to the selector, however far the caller
        that read it got (see :meth:`SocketWatch.take_back`); the I/O thread is woken
        when it must act (``stop``, a failure)."""
        if self._out.done:  # the selector is closed
            return
        if not self._watch.take_back():
            self.failed_here = ConnectionLost(
                "the socket's watch was lost to an interruption while a caller read it"
            )
        if stop or self.failed_here is not None:
            self._writer.wake_unless_woken()

    def _read_until(self, done: Callable[[], bool], deadline: float) -> bool:
        """The caller's reading loop; True when the I/O thread must take over at once
        (the connection broke or the stream ended)."""
        io_lock = self._io_lock
        assert self._here_poll is not None
        poll = self._here_poll.poll
        out = self._out
        watch = self._watch
        writer = self._writer
        # Bound once (cheaper), and so the ones this caller uses whatever finished() does.
        read = self._read
        reader = self._reader
        draining_untold = self._draining_untold
        take_arrived = self._take_arrived
        hand_over = self._hand_over
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not watch.more_to_read and not poll(remaining * 1000.0):
                continue
            with io_lock:
                if out.done:  # the socket is closed (its number may be reused)
                    return False
                try:
                    read()
                    writer.pump()  # a window the broker opened: what waited for it
                    writer.write_out()
                except Exception as exc:  # the I/O thread ends the stream with it
                    self.failed_here = exc
                    stop = True
                except BaseException:  # interrupted halfway: the connection's state is lost
                    self.failed_here = ConnectionLost("reading was interrupted")
                    raise
                else:
                    # The stream's end, or a graceful GOAWAY to pass on, is the I/O
                    # thread's to act on.
                    stop = reader.ended or (reader.draining and draining_untold())
                arrived = take_arrived()
            if arrived:
                hand_over(arrived, False)
            if stop:
                return True
            if self._gathering.due <= 0:
                # The caller's answer is in, though not resolved here (a refusal goes
                # to the publisher thread): waiting on for more would only delay it.
                return False
        return False
