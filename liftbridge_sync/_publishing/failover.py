"""Deciding, off the publisher thread, whether a silent partition lost its publishes.

A partition leader that dies, or a NATS server that restarts, loses the publishes that
were on their way: the broker that took them from our stream handed them to NATS, and
nobody stores or answers them. The publish stream itself stays open, so only silence
tells. The publisher notices the silence (a partition's oldest unacknowledged publish is
older than ``resend_after``) and asks a :class:`LeaderProbe` about that partition, which
asks the partition's current leader (per fresh metadata) for its state twice, a moment
apart. The publisher re-sends the partition's silent publishes only when both hold:

* **trouble was seen** since they were sent: a look found no leader answering (dead, or
  none elected yet), the leader is not the one the client knew before, the publish
  stream broke, or a broker refused publishes because its NATS connection was down.
  Silence alone is no proof of loss: on an overloaded machine publishes can sit in
  queues (ours, the kernel's, the server's) for longer than ``resend_after``;
* **the leader is idle**: everything in its log is committed (newest offset equal to
  the high watermark; otherwise acks may still come once a follower catches up or leaves
  the ISR) and the log did not move between the two looks; or, when the partition's
  leader is no longer the one the client knew when the silence began, everything in the
  new leader's log is committed at both looks. A new leader never acks what it did not
  take itself, so a log that moves there (newer publishes, other clients) is no reason
  to wait: the decision rests on the leader's state, not on whether our own window
  still fills.

A re-send duplicates a message that was stored but whose ack was lost (delivery is
at-least-once).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.leader import leader_address_of
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync.errors import LiftbridgeError
from liftbridge_sync.models import PartitionInfo

__all__ = ["THREAD_NAME", "LeaderProbe", "ProbeResult"]

THREAD_NAME = "liftbridge-publisher-probe"

_log = logging.getLogger("liftbridge_sync.publisher")

#: Seconds between the two looks at the leader's log.
_SETTLE = 0.2
#: Bound on each look (metadata refresh, then the leader's answer).
_LOOK_TIMEOUT = 2.0
#: How long close() waits for the probe thread: the refresh or look under way (each
#: bounded by _LOOK_TIMEOUT) and a margin; the thread is daemonic beyond that.
_CLOSE_WAIT = 2 * _LOOK_TIMEOUT + 1.0

PartitionKey = tuple[str, int]
#: One look at a leader: ``(leader id, newest offset, high watermark)``.
_Look = tuple[str, int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeResult:
    """The verdict on one partition, reported to the publisher thread."""

    key: PartitionKey
    #: When the probe was asked for: publishes sent before then are the silent ones.
    started: float
    #: The leader answered twice, its log all committed and not moving.
    idle: bool
    #: No leader answered, or it is not the one the client knew before.
    trouble: bool
    #: What was seen, for the log.
    detail: str
    #: The leader that answered (``None``: none did).
    leader: str | None = None
    #: The leader the client's metadata named before this probe refreshed it.
    known_leader: str | None = None
    #: The leader answered twice with everything in its log committed (whether or not
    #: the log moved between the two looks).
    committed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Gone:
    """A request to fetch a stream judged deleted, and drop it unless it is there."""

    stream: str


class LeaderProbe:
    """Probes silent partitions on a lazily started ``liftbridge-publisher-probe`` thread.

    Args:
        core: The client's core (metadata and leader calls).
        report: Called on the probe thread with each :class:`ProbeResult`.
        clock: Monotonic clock.

    Thread-safe: :meth:`request` and :meth:`close` may be called from any thread.
    """

    def __init__(
        self,
        core: ClientCore,
        report: Callable[[ProbeResult], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._report = report
        self._clock = clock
        #: Partitions to probe, streams whose metadata to fetch (str) or to drop unless
        #: they are there (_Gone), or None (stop).
        self._requests: queue.SimpleQueue[tuple[PartitionKey, float] | str | _Gone | None] = (
            queue.SimpleQueue()
        )
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def request(self, key: PartitionKey, started: float) -> None:
        """Probe ``key``; the verdict arrives through ``report``. Ignored once closed."""
        self._put((key, started))

    def refresh(self, stream: str) -> None:
        """Fetch ``stream``'s metadata into the client's cache (nothing is reported;
        failures are ignored). Ignored once closed."""
        self._put(stream)

    def forget(self, stream: str) -> None:
        """Fetch the metadata of ``stream``, judged deleted, and drop it from the cache
        unless the answer has it (nothing is reported; failures are ignored). Ignored
        once closed."""
        self._put(_Gone(stream))

    def _put(self, item: tuple[PartitionKey, float] | str | _Gone) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()
        self._requests.put(item)

    def close(self, wait: float | None = None) -> None:
        """Stop the thread (a probe under way is abandoned after the look it is in) and
        join it, for as long as one look and a metadata refresh may take, or ``wait``
        seconds if shorter (a look under way then ends by itself: at its own timeout,
        or when the client's channels close). Idempotent."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        self._requests.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(_CLOSE_WAIT if wait is None else min(wait, _CLOSE_WAIT))

    def _run(self) -> None:
        while not self._stop.is_set():
            # Everything asked for meanwhile is probed together: a broker that led many
            # partitions makes them all silent at once, and they share one settle wait.
            batch: list[tuple[PartitionKey, float]] = []
            streams: set[str] = set()
            gone: set[str] = set()
            item = self._requests.get()
            while item is not None:
                if isinstance(item, str):
                    streams.add(item)
                elif isinstance(item, _Gone):
                    gone.add(item.stream)
                else:
                    batch.append(item)
                try:
                    item = self._requests.get_nowait()
                except queue.Empty:
                    break
            if streams:
                try:
                    self._core.refresh_once(sorted(streams), self._clock() + _LOOK_TIMEOUT)
                except LiftbridgeError as exc:
                    _log.debug("metadata refresh for %s failed: %s", sorted(streams), exc)
            if gone:
                try:
                    self._core.refresh_once(
                        sorted(gone), self._clock() + _LOOK_TIMEOUT, drop_unknown=True
                    )
                except LiftbridgeError as exc:
                    _log.debug("metadata refresh for %s failed: %s", sorted(gone), exc)
            if batch:
                try:
                    results = self._probe_all(batch)
                except Exception as exc:  # a probe must never end the thread
                    _log.exception("probing silent partitions failed")
                    results = [
                        ProbeResult(key, started, False, False, f"probe failed: {exc!r}")
                        for key, started in batch
                    ]
                if self._stop.is_set():
                    return
                for result in results:
                    self._report(result)
            if item is None:
                return

    def _probe_all(self, batch: list[tuple[PartitionKey, float]]) -> list[ProbeResult]:
        core = self._core
        snapshot = core.metadata.snapshot
        known = {key: None if snapshot is None else snapshot.partition(*key) for key, _ in batch}
        streams = sorted({key[0] for key, _ in batch})
        unreachable: str | None = None
        try:
            core.refresh_once(streams, self._clock() + _LOOK_TIMEOUT)
        except LiftbridgeError as exc:
            unreachable = f"no broker answered for metadata ({exc})"
        # Looks one after another, each up to _LOOK_TIMEOUT: a close() between two of
        # them abandons the rest, so that closing waits for one look at most.
        first: dict[PartitionKey, _Look | str] = {}
        for key, _ in batch:
            if self._stop.is_set():
                return []
            first[key] = unreachable or self._look(*key)
        settled = [
            k for k, look in first.items() if not isinstance(look, str) and look[1] <= look[2]
        ]
        if settled and self._stop.wait(_SETTLE):
            return []
        second: dict[PartitionKey, _Look | str] = {}
        for key in settled:
            if self._stop.is_set():
                return []
            second[key] = self._look(*key)
        results = []
        for key, started in batch:
            look, again = first[key], second.get(key)
            idle, trouble, detail = self._verdict(known[key], look, again)
            leader = None if isinstance(look, str) else look[0]
            committed = isinstance(again, tuple) and again[0] == leader and again[1] <= again[2]
            was = known[key]
            results.append(
                ProbeResult(
                    key,
                    started,
                    idle,
                    trouble,
                    detail,
                    leader,
                    (was.leader or None) if was is not None else None,
                    committed,
                )
            )
        return results

    @staticmethod
    def _verdict(
        known: PartitionInfo | None, first: _Look | str, second: _Look | str | None
    ) -> tuple[bool, bool, str]:
        """``(idle, trouble, detail)`` from what the client knew and the two looks."""
        if isinstance(first, str):
            return False, True, first
        leader, newest, committed = first
        moved = known is not None and bool(known.leader) and known.leader != leader
        if newest > committed or second is None:
            uncommitted = f"leader {leader} has offsets {committed + 1}..{newest} uncommitted"
            return False, moved, uncommitted
        if isinstance(second, str):
            return False, True, second
        if second != first:
            return False, moved, f"the log moved ({first} -> {second})"
        was = f" (was {known.leader})" if moved and known is not None else ""
        return True, moved, f"leader {leader}{was} is idle at offset {newest}"

    def _look(self, stream: str, partition: int) -> _Look | str:
        """``(leader, newest offset, high watermark)`` from the leader the (just refreshed)
        metadata names, or why not."""
        core = self._core
        try:
            info = core.metadata.get().partition(stream, partition)
            if info is None:
                return "the partition is not in the metadata"
            address = leader_address_of(core, info)
            request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)
            response = core.invoke(
                address,
                rpcs.FETCH_PARTITION_METADATA,
                request,
                context=CallContext.LEADER,
                timeout=_LOOK_TIMEOUT,
            )
        except LiftbridgeError as exc:
            return f"no answer from a leader ({exc})"
        state = response.metadata
        return state.leader, state.newestOffset, state.highWatermark
