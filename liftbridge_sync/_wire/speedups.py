"""The optional C speedups of the publish path, or their pure-Python equivalents.

``liftbridge_sync._speedups`` (``liftbridge_sync/_speedups.c``) is built by ``setup.py``
when a C compiler is present; without it, or with the environment variable
``LIFTBRIDGE_SYNC_NO_SPEEDUPS`` set to anything but ``""``/``"0"`` at import time (see
:mod:`liftbridge_sync._extension`, which loads it), the functions below are pure Python
with the same results. :data:`ACTIVE` tells which
(public as :func:`liftbridge_sync.speedups_active`), :data:`INACTIVE_REASON` why not, and
:func:`note_fallback` logs it once at DEBUG when a client is first built.

* the codec's framing and ack decoding: ``frame_value``, ``frame_id``, ``frame_values``,
  ``frame_pairs`` and ``decode_ack`` of :mod:`~liftbridge_sync._wire.publish_codec`
  (which chooses between them and its pure-Python twins).
* :data:`scan_acks`: ``None`` in pure Python (the reader parses with protobuf); in C,
  reads successful acks straight from received HTTP/2 frames into :class:`Ack` objects
  with ``partition == -1``, answering the connection's PINGs and setting aside its
  SETTINGS and WINDOW_UPDATE frames (see the C source for what it leaves to Python).
* :data:`settle_acks`: ``None`` in pure Python; in C, resolves the futures of a leading
  run of those acks in bulk (see :func:`~liftbridge_sync._publishing.futures.settle_acks`).
* :data:`run_callbacks`: ``None`` in pure Python; in C, runs the done-callbacks of
  resolved futures nobody waits on (see :func:`~liftbridge_sync._publishing.futures.settle`).
* :data:`make_entries` / :data:`make_entry` / :data:`frame_entry` /
  :data:`pop_answered`: ``None`` in pure Python; in C, the publisher's entries and
  futures for framed requests, and answered entries off a deadline queue (see
  :mod:`~liftbridge_sync._publishing.pending`).
* :data:`submit_plain` (with :data:`setup_submit`):
  ``None`` in pure Python; in C, a publish of the common case entered and
  queued without running bytecode (see :meth:`~liftbridge_sync._publishing.publisher.
  Publisher.submit_value`).
* :data:`PendingCore`: ``None`` in pure Python; in C, the pending table's state and send
  lock in a C struct (see :mod:`~liftbridge_sync._publishing.pending_core`, its twin).
* :data:`OutboundQueue`: ``None`` in pure Python; in C, an HTTP/2 publish stream's
  outbound queue, flags and lock in a C struct (see
  :mod:`~liftbridge_sync._transport.h2.outbound_queue`, its twin).
* :data:`FutureCore`: ``None`` in pure Python; in C, a publish future's state in a C
  struct, the base of :class:`~liftbridge_sync._publishing.futures.PublishFuture` (its
  twin is :class:`~liftbridge_sync._publishing.futures.PyFutureCore`).
* :data:`EntryCore`: ``None`` in pure Python; in C, one pending publish in a C struct,
  the base of the publisher's ``Entry`` (twin:
  :class:`~liftbridge_sync._publishing.pending.PyEntryCore`).
* ``AckCore``: in C, the fields of an ack in a C struct, the base of
  :class:`~liftbridge_sync.models.Ack` (twin:
  :class:`~liftbridge_sync.models._ack.PyAckCore`; chosen by the models themselves).
* :data:`send_held` / :data:`recv_held`: ``None`` in pure Python; in C, one non-blocking
  ``send()`` / ``recv()`` on a file descriptor that keeps the GIL (see the C source for
  why; :mod:`~liftbridge_sync._transport.h2.connection` uses them on plaintext sockets).

Pure functions; thread-safe (:func:`note_fallback` logs at most once per process).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from liftbridge_sync import _extension
from liftbridge_sync.models import Ack, AckPolicy

__all__ = [
    "ACTIVE",
    "INACTIVE_REASON",
    "frame_entry",
    "make_entries",
    "make_entry",
    "note_fallback",
    "pop_answered",
    "recv_held",
    "run_callbacks",
    "scan_acks",
    "send_held",
    "settle_acks",
    "setup_entries",
    "setup_submit",
    "submit_plain",
    "PendingCore",
    "OutboundQueue",
    "FutureCore",
    "EntryCore",
    "Gate",
]

_log = logging.getLogger("liftbridge_sync.speedups")


#: ``scan_acks(buf, pos, stream_id, max_frame) -> (pos, acks, payload, control, pongs,
#: windows)``: ``control`` holds the SETTINGS (and zero-increment WINDOW_UPDATE) frames
#: skipped on the way (for h2), ``pongs`` the PING ACK frames answering the connection's
#: PINGs (to send), ``windows`` ``None`` or the WINDOW_UPDATE increments of the
#: connection and of the stream, with their frames.
scan_acks: (
    Callable[
        [bytearray, int, int, int],
        tuple[int, list[Ack], int, bytes, bytes, tuple[int, int, bytes] | None],
    ]
    | None
) = None
#: ``settle_acks(acks, pending, lock, owner) -> (count, futures_to_wake_or_call_back)``.
settle_acks: Callable[[list[Any], dict[str, Any], Any, bool], tuple[int, list[Any]]] | None = None
#: ``send_held(fd, data) -> bytes sent`` (0: would block); raises ``OSError``.
send_held: Callable[[int, bytes | bytearray], int] | None = None
#: ``recv_held(fd, size) -> bytes`` (``b""`` at end of stream; ``None``: would block).
recv_held: Callable[[int, int], bytes | None] | None = None
#: ``setup_entries(Entry, PublishFuture)`` once, then ``make_entries(framed, ids,
#: partition, wants_ack, timeout, deadline) -> (entries, futures)``.
setup_entries: Callable[[type, type], None] | None = None
make_entries: Callable[..., tuple[list[Any], list[Any]]] | None = None
#: ``run_callbacks(futures, start) -> (index of the first future with waiters, errors)``.
run_callbacks: Callable[[list[Any], int], tuple[int, list[tuple[Any, BaseException]]]] | None = None
#: ``make_entry(framed, correlation_id, partition, wants_ack, timeout, deadline)``.
make_entry: Callable[..., Any] | None = None
#: ``frame_entry(head, value, prefix, n, max_size, partition, wants_ack, timeout,
#: deadline) -> entry | None`` (``None``: longer than ``max_size``).
frame_entry: Callable[..., Any] | None = None
#: ``pop_answered(deadline_queue, pending) -> whether a pending entry is at its head``.
pop_answered: Callable[..., bool] | None = None
#: ``PendingCore(max_in_flight, max_message, id_prefix, clock)``: the pending table's
#: state and send lock (``_speedups_table.c``; twin: ``_publishing.pending_core``).
PendingCore: Any = None
#: ``OutboundQueue(write_here_at)``: an HTTP/2 publish stream's outbound queue and lock
#: (``_speedups_outbound.c``; twin: ``_transport.h2.outbound_queue``).
OutboundQueue: Any = None
#: ``FutureCore``: a publish future's state in a C struct, the base of ``PublishFuture``
#: (``_speedups_future.c``; twin: ``_publishing.futures.PyFutureCore``).
FutureCore: Any = None
#: ``EntryCore(framed, correlation_id, partition, wants_ack, future, timeout, deadline,
#: seq=0, resent_at=0.0, key=None)``: one pending publish in a C struct, the base of the
#: publisher's ``Entry`` (``_speedups_entry.c``; twin: ``_publishing.pending.PyEntryCore``).
EntryCore: Any = None
#: ``Gate()``: what a blocked publishing thread sleeps on, opened with the GIL released
#: (``_speedups_gate.c``; twin: ``_publishing.gates.PyGate``).
Gate: Any = None
#: ``setup_submit(deque_type, heads, no_ack)`` once, then
#: ``submit_plain(core, stream, value, partition, ack_policy, timeout, direct=False) -> future |
#: (future, todo, stream) | entry | None`` (see ``_speedups_submit.c``).
setup_submit: Callable[..., None] | None = None
submit_plain: Callable[..., Any] | None = None
ACTIVE = False
#: Why :data:`ACTIVE` is ``False`` (``""`` when it is ``True``).
INACTIVE_REASON = _extension.INACTIVE_REASON
_speedups = _extension.MODULE
if _speedups is not None:
    _speedups.setup(Ack, (AckPolicy.LEADER, AckPolicy.ALL, AckPolicy.NONE))
    scan_acks = _speedups.scan_acks
    settle_acks = _speedups.settle_acks
    send_held = _speedups.send_held
    recv_held = _speedups.recv_held
    setup_entries = _speedups.setup_entries
    make_entries = _speedups.make_entries
    make_entry = _speedups.make_entry
    frame_entry = _speedups.frame_entry
    pop_answered = _speedups.pop_answered
    setup_submit = _speedups.setup_submit
    submit_plain = _speedups.submit_plain
    PendingCore = _speedups.PendingCore
    OutboundQueue = _speedups.OutboundQueue
    FutureCore = _speedups.FutureCore
    EntryCore = _speedups.EntryCore
    Gate = _speedups.Gate
    run_callbacks = _speedups.run_callbacks
    ACTIVE = True

_noted = threading.Lock()
_noted_once = False


def note_fallback() -> None:
    """Log, once per process, at DEBUG, that the pure-Python fallback runs and why.

    Called when a client is built: an install without a C compiler otherwise only
    says so under ``pip install -v``. Does nothing when :data:`ACTIVE`.
    """
    global _noted_once
    if ACTIVE or _noted_once:
        return
    with _noted:
        if _noted_once:
            return
        _noted_once = True
    _log.debug(
        "liftbridge-sync C speedups inactive (%s): using the pure-Python fallback "
        "(same results, about half the publish throughput)",
        INACTIVE_REASON,
    )
