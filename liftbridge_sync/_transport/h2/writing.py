"""The publish connection's outbound side: callers queue framed requests, and whoever
holds the I/O lock frames and writes them.

Callers append framed requests to a list under a short lock and wake the I/O thread on
the idle → busy transition (one byte on a socketpair). A caller about to wait for its
answer writes itself when the I/O thread is idle, and so does a caller in front of whom
``WRITE_HERE_AT`` bytes wait. Whoever holds the I/O lock takes the queue, frames it
into as few DATA frames as flow control allows (:func:`~.outbound.frame_data`) and
writes it with one ``send()``.

Combining: when the I/O thread hands over the acks of several ``publish()`` callers at
once, the first of them to publish again only queue their next request (no ``send()``,
no wake-up), and the last one writes them all with one ``send()``: the broker then
reads and answers them together, and its acks come back together too. The callers of
a hand-over that comes before all those of the previous one are back add to those
expected. A request left in the queue that way waits at most ``COMBINE_WAIT`` (the I/O
thread writes it then), whether or not the other callers come back; the combining ends
once ``COMBINE_WAIT`` passes with none of them coming back (with many threads they come
back one at a time, each wanting the GIL, over more than that).

:class:`Writer` does this for one :class:`~.connection.H2PublishStream`, which
composes it; :class:`SocketWatch` is what the stream's selector watches the socket for.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections import deque
from collections.abc import Callable

import h2.connection
import h2.exceptions

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2.framing import PREFIX
from liftbridge_sync._transport.h2.gathering import AckGathering
from liftbridge_sync._transport.h2.limits import (
    CONTROL_ROOM,
    ENHANCE_YOUR_CALM,
    OUTPUT_CAP,
    Flooded,
)
from liftbridge_sync._transport.h2.outbound import frame_data
from liftbridge_sync._transport.h2.outbound_queue import OutboundQueueType
from liftbridge_sync._transport.h2.sockets import ConnectionLost, SocketCalls
from liftbridge_sync._transport.publish_stream import StreamEvent, StreamSent

__all__ = ["COMBINE_WAIT", "WRITE_HERE_AT", "SocketWatch", "Writer"]

#: A caller queueing a request writes the queue itself, when no other thread is
#: writing, once this many bytes wait. A thread publishing in a loop holds the GIL, and
#: the I/O thread may wait a whole switch interval (5 ms) to get it: without this, a
#: burst went out only when its caller stopped, and the broker sat idle meanwhile.
WRITE_HERE_AT = 16 * 1024
#: The longest a ``publish()`` caller's request waits in the queue for the callers woken
#: with it (combining, see the module docstring) before the I/O thread writes it.
COMBINE_WAIT = 0.001
#: Compact the unsent buffer once this much of its head has been framed.
_COMPACT_AT = 1 << 20


def _no_ping() -> None:
    """The ping of a stream that has finished (see :meth:`Writer.finished`)."""


class SocketWatch:
    """What the I/O thread's selector watches a publish socket for: reading always,
    writing while output waits for the socket (:meth:`set_want_write`), nothing while a
    ``publish()`` caller reads it (:class:`~.reading.CallerReads` takes it off with
    :meth:`lend` and puts it back with :meth:`take_back`, on its own thread: no call
    more on the way of a ``publish()``); and whether
    the last read stopped at its bound with more perhaps waiting, which no selector
    reports (TLS may hold decrypted bytes).

    Used only by whoever holds the stream's I/O lock. Not thread-safe beyond that.
    """

    __slots__ = ("_selector", "_sock", "more_to_read", "reading_here", "want_write")

    def __init__(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        self._selector = selector
        self._sock = sock
        #: Output waits for the socket: the selector watches for writability too.
        self.want_write = False
        #: A caller reads the socket; the I/O thread's selector does not watch it.
        self.reading_here = False
        #: The last read stopped at ``READS_PER_TURN`` with more perhaps waiting.
        self.more_to_read = False
        selector.register(sock, selectors.EVENT_READ)

    def set_want_write(self, want: bool) -> None:
        """Watch for writability too (``want``) or no longer; while a caller reads,
        only noted (the socket is registered with it when the caller is done).

        Raises:
            ConnectionLost: the selector no longer watches the socket (see
                :meth:`take_back`).
        """
        self.want_write = want
        if not self.reading_here:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            try:
                self._selector.modify(self._sock, events)
            except (KeyError, OSError):
                raise ConnectionLost("the socket's watch was lost") from None

    def lend(self) -> bool:
        """Take the socket off the selector for a caller to read it (``reading_here``
        set first: whoever finds it set with nobody reading calls :meth:`take_back`,
        whether or not the caller got as far as the selector); ``False`` if the
        selector did not watch it (see :meth:`take_back`)."""
        self.reading_here = True
        try:
            self._selector.unregister(self._sock)
        except (KeyError, ValueError, OSError):
            return False
        return True

    def take_back(self) -> bool:
        """Watch the socket again after a caller read it, however far the caller got
        (interrupted, it may not have taken it off the selector, or may have put it
        back already); ``False`` if the selector's own record and the kernel's no longer
        agree (an interruption inside :mod:`selectors`), which only ending the
        connection repairs. Idempotent."""
        if not self.reading_here:
            return True
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.want_write else 0)
        selector = self._selector
        try:
            try:
                selector.register(self._sock, events)
            except KeyError:  # never taken off: the caller was interrupted before that
                selector.modify(self._sock, events)
        except (KeyError, OSError):
            return False
        self.reading_here = False
        return True


class Writer:
    """Queueing one publish stream's requests and writing them out (see the module).

    The stream composes it and binds its callers' methods (``send_framed``,
    ``send_many``, ``send``, ``nudge``, ``write_direct``, ``queued_mark``,
    ``written_through``, ``probe``, ``close``) as its own, with no call in between.

    Args:
        out: The stream's outbound queue, whose lock is the stream's lock.
        io_lock: The stream's I/O lock (socket and h2 work).
        conn: The stream's HTTP/2 connection.
        stream_id: The ``PublishAsync`` call's stream.
        calls: Sends on the socket.
        wake_w: The write end of the I/O thread's wake-up socketpair.
        watch: What the I/O thread's selector watches the socket for.
        gathering: The low-water mark of the socket's reads (released for a caller
            who waits for its answer next; forgotten after a probe).
        epoch: The stream's number, for :class:`StreamSent`.
        on_event: Where :class:`StreamSent` events go.
        ping: Sends a PING, if the keepalive allows one now (a probe asked for it).

    Thread-safe: the queue and its flags under the queue's lock, the rest only by
    whoever holds ``io_lock``.
    """

    def __init__(
        self,
        out: OutboundQueueType,
        io_lock: threading.Lock,
        conn: h2.connection.H2Connection,
        stream_id: int,
        calls: SocketCalls,
        wake_w: socket.socket,
        watch: SocketWatch,
        gathering: AckGathering,
        epoch: int,
        on_event: Callable[[StreamEvent], None],
        ping: Callable[[], None],
    ) -> None:
        # Shared with callers, guarded by the queue's lock: the queue, its byte counts,
        # ``signalled``, ``done``, ``close_requested``, ``asked`` and the combining state
        # (``direct_mark``, ``combining``: how many more ``publish()`` callers queue
        # without writing; ``deferred``: some did, so the I/O thread takes the queue
        # within COMBINE_WAIT) are fields of _out (see outbound_queue).
        self._out = out
        self._notes: list[tuple[int, str]] = []  # (end byte offset, correlation id)
        self._probe_requested = False
        # Whoever holds _io_lock.
        self._io_lock = io_lock
        self._conn = conn
        self._stream_id = stream_id
        self._calls = calls
        self._wake_w = wake_w
        self._watch = watch
        self._gathering = gathering
        self._epoch = epoch
        self._on_event = on_event
        self._ping = ping
        #: Message bytes not yet given to h2, from ``unsent_pos`` on.
        self.unsent = bytearray()
        self.unsent_pos = 0
        self._framed_bytes = 0  # message bytes given to h2 (and so to the socket buffer)
        self._waiting_notes: deque[tuple[int, str]] = deque()
        #: Output the socket did not take yet (the stream's reads add h2's answers).
        self.outbuf = bytearray()
        #: ``close()`` was taken off the queue: END_STREAM once all before it is framed.
        self.closing = False
        self._half_closed = False
        #: What went wrong while a caller wrote: the I/O thread ends the stream with it.
        self.failed_here: BaseException | None = None

    # ------------------------------------------------------------------ callers

    def send_framed(self, framed: bytes, note: str | None = None, direct: bool = False) -> None:
        """Queue a framed request; never blocks. Dropped once the stream has ended.

        With ``direct`` (a caller about to wait for the answer) and the I/O thread idle,
        the caller writes it itself: no wake-up of the I/O thread on the way out. A
        caller also writes itself once ``WRITE_HERE_AT`` bytes wait (see there).
        """
        out = self._out
        out.acquire()  # not ``with``: half the cost, on every publish
        try:
            if out.done or out.close_requested:
                return  # the publisher re-sends pending requests on its next stream
            out.frames.append(framed)
            queued = out.queued_bytes = out.queued_bytes + len(framed)
            if note is not None:
                self._notes.append((queued, note))
            else:
                out.asked += 1
            if direct:
                out.direct_mark = out.asked
                if out.signalled:
                    return
                if out.combining:
                    # Callers woken by the I/O thread's last hand-over are still to
                    # queue theirs: the last of them writes all (or the I/O thread
                    # does, within COMBINE_WAIT).
                    out.combining -= 1
                    out.deferred = True
                    return
                if not self._io_lock.acquire(blocking=False):
                    self.wake()
                    return
            elif not self._writes_here(queued):
                return
        finally:
            out.release()
        self._write_here(direct)

    def queued_mark(self) -> int:
        """Bytes queued so far (see :meth:`written_through`)."""
        return self._out.queued_bytes

    def written_through(self, mark: int) -> bool:
        """Whether the first ``mark`` bytes queued were framed and given to the socket's
        output (what the socket did not take yet is left to the stall watch: a broker
        that does not read is not helped by sending again on the same connection)."""
        return self._framed_bytes >= mark

    def nudge(self, write_here: bool) -> None:
        """After a request was queued without :meth:`send_framed` (by the C fast path of
        ``Publisher.submit_value``): what ``send_framed`` would have done next. With
        ``write_here`` (``WRITE_HERE_AT`` bytes wait), the caller writes them if nobody
        else is; otherwise the I/O thread is woken unless it already is."""
        if write_here and self._io_lock.acquire(blocking=False):
            self._write_here()
        else:
            self.wake_unless_woken()

    def write_direct(self) -> None:
        """After a ``publish()`` caller's request was queued by the C fast path with no
        wake-up on its way and nobody combining (what :meth:`send_framed` with
        ``direct`` does next): the caller writes the queue itself if nobody else is,
        otherwise the I/O thread is woken unless it already is."""
        if self._io_lock.acquire(blocking=False):
            self._write_here(True)
        else:
            self.wake_unless_woken()

    def send_many(self, framed: list[bytes]) -> None:
        """Queue several framed requests at once (see :meth:`send_framed`)."""
        out = self._out
        with out:
            if out.done or out.close_requested:
                return
            out.frames.extend(framed)
            out.asked += len(framed)
            queued = out.queued_bytes = out.queued_bytes + sum(map(len, framed))
            if not self._writes_here(queued):
                return
        self._write_here()

    def send(self, request: api_pb2.PublishRequest, *, notify_sent: bool = False) -> None:
        """Serialize and queue ``request`` (see :meth:`send_framed`)."""
        data = request.SerializeToString()
        framed = PREFIX.pack(0, len(data)) + data
        self.send_framed(framed, request.correlationId if notify_sent else None)

    def probe(self) -> None:
        """Send a PING (if the keepalive allows one now); no answer within the keepalive
        timeout ends the connection."""
        out = self._out
        with out:
            if out.done or self._probe_requested:
                return
            self._probe_requested = True
            if not out.signalled:
                self.wake()

    def close(self) -> None:
        """Half-close once everything queued is written; responses keep arriving."""
        out = self._out
        with out:
            if out.done or out.close_requested:
                return
            out.close_requested = True
            if not out.signalled:
                self.wake()

    def wake(self) -> None:
        """Under the queue's lock: wake the I/O thread (one byte on the socketpair)."""
        # Under the lock, so the I/O thread cannot close the socket meanwhile; only one
        # byte per idle → busy transition, so the socketpair never fills up.
        self._out.signalled = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def wake_unless_woken(self) -> None:
        """Wake the I/O thread unless a wake-up is on its way or it has finished."""
        out = self._out
        with out:
            if not out.signalled and not out.done:
                self.wake()

    def start_combining(self, callers: int, on_io_thread: bool) -> None:
        """A hand-over of ``callers`` acks may wake as many ``publish()`` callers: all
        but the last of them to come back only queue their next request (combining, see
        the module). ``on_io_thread``: handed over by the I/O thread, not by a caller
        reading (:mod:`.reading`)."""
        out = self._out
        with out:
            # Those of an earlier hand-over still to come count too: the last caller of
            # all writes (with many threads they come back slowly).
            expected = out.combining + 1 if out.combining else 0
            out.combining = expected + callers - 1
        if not on_io_thread:
            # The I/O thread may be waiting with no end in sight (the socket is a
            # caller's meanwhile): it must come back within COMBINE_WAIT to write what
            # the woken callers only queue, or that waits for the next event, seconds
            # away, and the publisher takes the silence for a loss and sends it again.
            self.wake_unless_woken()

    def finished(self) -> None:
        """Under the I/O lock, once the stream has finished (``done`` set): drop the
        ``ping`` collaborator, which refers back to the stream, so that the stream is
        freed by reference counting once nobody holds it (no cycle to collect). Nothing
        pings after ``done``: the queue is taken only before it."""
        self._ping = _no_ping

    def stop_combining(self) -> None:
        """None of the callers woken came back within ``COMBINE_WAIT``: stop waiting for
        them."""
        out = self._out
        with out:
            out.combining = 0

    def _writes_here(self, queued: int) -> bool:
        """Under the queue's lock, after queueing: whether the caller writes the queue
        itself (``WRITE_HERE_AT`` bytes wait and nobody else is writing; ``_io_lock`` is
        then held). If not, the I/O thread is woken unless it already is."""
        out = self._out
        if queued - out.taken_bytes >= WRITE_HERE_AT and self._io_lock.acquire(blocking=False):
            return True
        if not out.signalled:
            self.wake()
        return False

    def _write_here(self, direct: bool = False) -> None:
        """Frame and send what is queued on the calling thread; holds ``_io_lock``.
        ``direct``: the caller waits for its answer next, so acks are not gathered.

        A write that fails leaves its error for the I/O thread, which ends the stream
        with it (:attr:`failed_here`). So does one interrupted half-way (Ctrl-C raises
        ``KeyboardInterrupt`` at whatever call the main thread makes): requests taken off
        the queue may not be framed, and bytes sent may not be counted as sent, so the
        connection cannot go on (sent again on a new one, they would otherwise be
        stored twice, or never); the publisher re-sends what is unanswered, and says so.
        """
        failed = True
        try:
            if not self._out.done:
                self.take_queue(on_io_thread=False)
                self.pump()
                self.write_out()
                if direct:
                    self._gathering.release()
            failed = False
        except Exception as exc:
            self.failed_here = exc
        except BaseException:
            self.failed_here = ConnectionLost("a write on a publishing thread was interrupted")
            raise
        finally:
            self._io_lock.release()
            if failed:
                self.wake_unless_woken()

    # ------------------------------------------------------------------ I/O lock holder

    def take_queue(self, on_io_thread: bool = True) -> None:
        """Move what callers queued into the unsent buffer, note ``close()`` and send the
        PING a probe asked for. ``on_io_thread``: called by the I/O thread, which alone
        reads the wake-up byte."""
        out = self._out
        with out:
            batch = out.take()
            notes = self._notes
            closing = out.close_requested
            probe = self._probe_requested
            out.deferred = False
            if notes:
                self._notes = []
            self._probe_requested = False
            if on_io_thread:
                # Only the I/O thread reads the wake-up byte: a caller writing itself
                # leaves the flag set, so no second byte is sent while one is on its way.
                out.signalled = False
        if batch:
            self.unsent += b"".join(batch)
        if notes:
            self._waiting_notes.extend(notes)
        if closing:
            self.closing = True
        if probe:
            self._ping()
            self._gathering.forget()  # an ack timed out: its answer may never come

    def pump(self) -> bool:
        """Frame as many pending bytes as the flow-control windows and the output cap
        allow (into the output buffer, by :func:`~.outbound.frame_data`); whether any
        were."""
        unsent = self.unsent
        size = len(unsent)
        if self.unsent_pos == size:
            return False
        pos = frame_data(
            self._conn, self._stream_id, unsent, self.unsent_pos, self.outbuf, OUTPUT_CAP
        )
        self._framed_bytes += pos - self.unsent_pos
        if pos == size:
            unsent.clear()
            pos = 0
        elif pos >= _COMPACT_AT:
            del unsent[:pos]
            pos = 0
        framed = pos != self.unsent_pos
        self.unsent_pos = pos
        return framed

    def write_out(self) -> None:
        """:meth:`flush`, then frame and write on while the socket takes everything
        (framing stops at the output cap, and nothing else would bring us back)."""
        self.flush()
        while not self.outbuf and self.unsent_pos != len(self.unsent) and self.pump():
            self.flush()

    def end_once_framed(self) -> bool:
        """END_STREAM once everything queued before ``close()`` has been framed; whether
        it was sent now."""
        if self.closing and not self._half_closed and self.unsent_pos == len(self.unsent):
            self._half_closed = True
            self._conn.end_stream(self._stream_id)
            return True
        return False

    def flush(self) -> None:
        """Write what h2 and the output buffer hold, as far as the socket takes it, and
        emit :class:`StreamSent` for the requests written out.

        Raises:
            ConnectionLost: the send failed.
            Flooded: more output waits than the broker may make us hold (see there).
        """
        data = self._conn.data_to_send()
        out = self.outbuf
        if data:
            if out:
                out += data
            else:
                sent = self._calls.send_some(data)
                if sent < len(data):
                    out += data[sent:]
        while out:
            sent = self._calls.send_some(out)
            if not sent:
                break
            del out[:sent]
        watch = self._watch
        if bool(out) != watch.want_write:
            watch.set_want_write(bool(out))
        if len(out) > OUTPUT_CAP + CONTROL_ROOM:
            self._flooded()
        if not out and self._waiting_notes:
            notes = self._waiting_notes
            framed = self._framed_bytes
            emit = self._on_event
            while notes and notes[0][0] <= framed:
                emit(StreamSent(self._epoch, notes.popleft()[1]))

    def _flooded(self) -> None:
        """End the connection the broker flooded with requests for answers (see
        :mod:`.limits`): ``GOAWAY(ENHANCE_YOUR_CALM)`` after what is queued, as far as
        the socket takes it.

        Raises:
            Flooded: always.
        """
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._conn.close_connection(error_code=ENHANCE_YOUR_CALM)
            self.outbuf += self._conn.data_to_send()
            self._calls.send_some(self.outbuf)
        raise Flooded(
            f"the broker asked for more answers (PING or SETTINGS acknowledgements) than "
            f"it read: more than {len(self.outbuf) >> 10} KiB unread; sent "
            "GOAWAY(ENHANCE_YOUR_CALM)"
        )
