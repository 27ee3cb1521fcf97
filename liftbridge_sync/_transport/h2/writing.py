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

:class:`QueuedWrites` is the part of
:class:`~.connection.H2PublishStream` that does this; its state is set up there.
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
from liftbridge_sync._transport.h2.sockets import SocketCalls
from liftbridge_sync._transport.publish_stream import StreamEvent, StreamSent

__all__ = ["COMBINE_WAIT", "WRITE_HERE_AT", "QueuedWrites"]

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


class QueuedWrites:
    """Queueing requests and writing them out (see the module). Thread-safe as
    :class:`~.connection.H2PublishStream`: the queue and flags under ``_lock``, the
    rest only by whoever holds ``_io_lock``."""

    # Shared with callers, guarded by _lock (the outbound queue's lock): the queue, its
    # byte counts, ``signalled``, ``done``, ``close_requested``, ``asked`` and the
    # combining state (``direct_mark``, ``combining``: how many more ``publish()``
    # callers queue without writing; ``deferred``: some did, so the I/O thread takes the
    # queue within COMBINE_WAIT) are fields of _out (see outbound_queue).
    _out: OutboundQueueType
    _lock: OutboundQueueType
    _notes: list[tuple[int, str]]  # (end byte offset, correlation id)
    _probe_requested: bool
    _gathering: AckGathering
    # Whoever holds _io_lock.
    _io_lock: threading.Lock
    _conn: h2.connection.H2Connection
    _stream_id: int
    _unsent: bytearray  # message bytes not yet given to h2
    _unsent_pos: int
    _framed_bytes: int  # message bytes given to h2 (and so to the socket buffer)
    _waiting_notes: deque[tuple[int, str]]
    _outbuf: bytearray  # output the socket did not take yet
    _closing: bool
    _want_write: bool
    _reading_here: bool
    _calls: SocketCalls
    _selector: selectors.BaseSelector
    _sock: socket.socket
    _wake_w: socket.socket
    _epoch: int
    _on_event: Callable[[StreamEvent], None]

    def _ping(self) -> None:
        """Queue a PING (the connection's keepalive; see there)."""
        raise NotImplementedError

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
                    self._wake()
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
            self._wake_unless_woken()

    def write_direct(self) -> None:
        """After a ``publish()`` caller's request was queued by the C fast path with no
        wake-up on its way and nobody combining (what :meth:`send_framed` with
        ``direct`` does next): the caller writes the queue itself if nobody else is,
        otherwise the I/O thread is woken unless it already is."""
        if self._io_lock.acquire(blocking=False):
            self._write_here(True)
        else:
            self._wake_unless_woken()

    def _writes_here(self, queued: int) -> bool:
        """Under ``_lock``, after queueing: whether the caller writes the queue itself
        (``WRITE_HERE_AT`` bytes wait and nobody else is writing; ``_io_lock`` is then
        held). If not, the I/O thread is woken unless it already is."""
        out = self._out
        if queued - out.taken_bytes >= WRITE_HERE_AT and self._io_lock.acquire(blocking=False):
            return True
        if not out.signalled:
            self._wake()
        return False

    def _write_here(self, direct: bool = False) -> None:
        """Frame and send what is queued on the calling thread; holds ``_io_lock``.
        ``direct``: the caller waits for its answer next, so acks are not gathered."""
        try:
            if not self._out.done:
                self._take_queue(on_io_thread=False)
                self._pump()
                self._write_out()
                if direct:
                    self._gathering.release()
            failed = False
        except Exception:  # the I/O thread sees the broken socket and ends the stream
            failed = True
        finally:
            self._io_lock.release()
        if failed:
            self._wake_unless_woken()

    def _flooded(self) -> None:
        """End the connection the broker flooded with requests for answers (see
        :mod:`.limits`): ``GOAWAY(ENHANCE_YOUR_CALM)`` after what is queued, as far as
        the socket takes it.

        Raises:
            Flooded: always.
        """
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._conn.close_connection(error_code=ENHANCE_YOUR_CALM)
            self._outbuf += self._conn.data_to_send()
            self._calls.send_some(self._outbuf)
        raise Flooded(
            f"the broker asked for more answers (PING or SETTINGS acknowledgements) than "
            f"it read: more than {len(self._outbuf) >> 10} KiB unread; sent "
            "GOAWAY(ENHANCE_YOUR_CALM)"
        )

    def _wake_unless_woken(self) -> None:
        """Wake the I/O thread unless a wake-up is on its way or it has finished."""
        with self._lock:
            if not self._out.signalled and not self._out.done:
                self._wake()

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

    def _wake(self) -> None:
        # Called under _lock, so the I/O thread cannot close the socket meanwhile; only
        # one byte per idle → busy transition, so the socketpair never fills up.
        self._out.signalled = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _take_queue(self, on_io_thread: bool = True) -> None:
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
            self._unsent += b"".join(batch)
        if notes:
            self._waiting_notes.extend(notes)
        if closing:
            self._closing = True
        if probe:
            self._ping()
            self._gathering.forget()  # an ack timed out: its answer may never come

    def _pump(self) -> bool:
        """Frame as many pending bytes as the flow-control windows and the output cap
        allow (into the output buffer, by :func:`~.outbound.frame_data`); whether any
        were."""
        unsent = self._unsent
        size = len(unsent)
        if self._unsent_pos == size:
            return False
        pos = frame_data(
            self._conn, self._stream_id, unsent, self._unsent_pos, self._outbuf, OUTPUT_CAP
        )
        self._framed_bytes += pos - self._unsent_pos
        if pos == size:
            unsent.clear()
            pos = 0
        elif pos >= _COMPACT_AT:
            del unsent[:pos]
            pos = 0
        framed = pos != self._unsent_pos
        self._unsent_pos = pos
        return framed

    def _write_out(self) -> None:
        """:meth:`_flush`, then frame and write on while the socket takes everything
        (framing stops at the output cap, and nothing else would bring us back)."""
        self._flush()
        while not self._outbuf and self._unsent_pos != len(self._unsent) and self._pump():
            self._flush()

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        out = self._outbuf
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
        if bool(out) != self._want_write:
            self._want_write = bool(out)
            if not self._reading_here:  # else registered again when the caller is done
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
                self._selector.modify(self._sock, events)
        if len(out) > OUTPUT_CAP + CONTROL_ROOM:
            self._flooded()
        if not out and self._waiting_notes:
            notes = self._waiting_notes
            framed = self._framed_bytes
            emit = self._on_event
            while notes and notes[0][0] <= framed:
                emit(StreamSent(self._epoch, notes.popleft()[1]))
