"""What the publisher keeps per publish, and the events its thread receives.

Pure data and one small thread-safe ledger, shared by the publisher's parts: the
callers' side (:mod:`.publisher`), the owner thread (:mod:`.owner`) and the handling
of answers (:mod:`.answers`).
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import threading
from typing import TYPE_CHECKING, Any

from liftbridge_sync._publishing.failover import PartitionKey
from liftbridge_sync._publishing.futures import (
    FailureSink,
    PublishFuture,
    Unobserved,
)
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.publish_codec import Answer, frame_id, stream_and_partition
from liftbridge_sync.models import Ack

__all__ = [
    "FAILURES_QUOTED",
    "INF",
    "KICK",
    "MAX_NESTING",
    "TOO_DEEP",
    "WAKE",
    "AckFuture",
    "Close",
    "Entry",
    "EntryCore",
    "FailureLedger",
    "Forwarded",
    "Outcome",
    "failure",
    "new_entries",
    "frame_entry",
    "new_entry",
    "pop_answered",
    "PyEntryCore",
]

AckFuture = PublishFuture[Ack | None]
MAX_NESTING = 32
TOO_DEEP = (
    f"done-callbacks that wait (publish, flush, a full window) are nested more than "
    f"{MAX_NESTING} deep; nothing was sent. Use publish_async in deeply chained callbacks"
)
#: How many unobserved failures ``flush()`` quotes in its error.
FAILURES_QUOTED = 10
INF = float("inf")
Outcome = tuple[PublishFuture[Any], Any, BaseException | None]


class FailureLedger(FailureSink):
    """Failed publishes that nobody can observe any more, for ``flush()`` to report.

    The rule, race-free however many threads share the client: a failure counts as
    unobserved only once its future is gone (garbage-collected) without anybody having
    retrieved its outcome (``result()``, ``exception()``, a ``publish_batch`` outcome;
    a done-callback that calls one of them), as asyncio reports an exception that was
    never retrieved. While some thread still holds the future, it may yet look: no
    ``flush()`` reports it. Each failure gets an :class:`_Unretrieved` tracker on its
    future; the tracker's finalizer reports it here if it was never retrieved. Nothing
    is done per successful publish.

    Thread-safe: failures are recorded on any publishing thread, retrievals on any
    thread, and finalizers run wherever the last reference goes (or the garbage
    collector runs), hence a re-entrant lock.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._live = 0  # trackers neither retrieved nor dropped
        self._dropped = _Dropped()

    def tracker(self, error: BaseException) -> Unobserved:
        with self._lock:
            self._live += 1
        return _Unretrieved(self, error)

    @property
    def live(self) -> int:
        """Failed futures that are still held and not yet retrieved."""
        return self._live

    def retrieved(self) -> None:
        """A tracker's failure was retrieved (once per tracker)."""
        with self._lock:
            self._live -= 1

    def dropped(self, error: BaseException) -> None:
        """A tracker's future went away unretrieved (once per tracker)."""
        with self._lock:
            self._live -= 1
            dropped = self._dropped
            dropped.count += 1
            if len(dropped.errors) < FAILURES_QUOTED:
                dropped.errors.append(error)

    def take(self) -> tuple[int, list[BaseException]]:
        """The failures dropped unretrieved so far (count, first errors), forgetting them.

        Futures held only in reference cycles are found by collecting garbage first, and
        only when some failed future is still unaccounted for (never on the success path).
        """
        if self._live:
            gc.collect()
        with self._lock:
            # One swap: a finalizer running meanwhile (on this thread, from an allocation)
            # adds either to what is taken or to what is left, never to nothing.
            dropped, self._dropped = self._dropped, _Dropped()
        return dropped.count, dropped.errors


class _Dropped:
    """Failures dropped unretrieved since the last take. Guarded by the ledger's lock."""

    __slots__ = ("count", "errors")

    def __init__(self) -> None:
        self.count = 0
        self.errors: list[BaseException] = []


class _Unretrieved(Unobserved):
    """One failed future's tracker: reports the failure when freed unretrieved.

    Owned by its future (its ``ledger``), so it is freed with it. Thread-safe.
    """

    __slots__ = ("_error", "_ledger", "_seen")

    def __init__(self, ledger: FailureLedger, error: BaseException) -> None:
        self._ledger = ledger
        self._error = error
        self._seen = False

    def observed(self, future: PublishFuture[Any]) -> None:
        if self._seen:
            return
        ledger = self._ledger
        with ledger._lock:
            if self._seen:  # another thread retrieved it meanwhile
                return
            self._seen = True
        ledger.retrieved()

    def __del__(self) -> None:
        # Nobody holds the future any more, so nobody can retrieve it concurrently.
        if not self._seen:
            self._seen = True
            try:
                self._ledger.dropped(self._error)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


class PyEntryCore:
    """One publish's fields: the pure-Python twin of ``_speedups.EntryCore``.

    The C type keeps them in a struct that the C entry makers and settling code read
    and write directly; both take the same arguments and have the same attributes.
    Written under the pending table's send lock (or before the entry is shared).
    """

    __slots__ = (
        "framed",
        "correlation_id",
        "partition",
        "wants_ack",
        "future",
        "timeout",
        "deadline",
        "seq",
        "resent_at",
        "key",
    )

    framed: bytes
    correlation_id: str
    partition: int
    wants_ack: bool
    future: AckFuture
    timeout: float
    deadline: float
    seq: int
    #: When it was last re-sent (0: never; it was sent at ``deadline - timeout``).
    resent_at: float
    #: ``(stream, partition)``, read from ``framed`` when first needed (rarely).
    key: PartitionKey | None

    def __init__(
        self,
        framed: bytes,
        correlation_id: str,
        partition: int,
        wants_ack: bool,
        future: AckFuture,
        timeout: float,
        deadline: float,
        seq: int = 0,
        resent_at: float = 0.0,
        key: PartitionKey | None = None,
    ) -> None:
        self.framed = framed
        self.correlation_id = correlation_id
        self.partition = partition
        self.wants_ack = wants_ack
        self.future = future
        self.timeout = timeout
        self.deadline = deadline
        self.seq = seq
        self.resent_at = resent_at
        self.key = key


if TYPE_CHECKING:
    EntryCore = PyEntryCore
else:
    #: The base that holds an entry's fields: the C struct when the speedups are
    #: active (the C code then needs no attribute lookups), else the twin.
    EntryCore = speedups.EntryCore or PyEntryCore


class Entry(EntryCore):
    """One publish: its framed request and what resolving it needs (fields in
    :data:`EntryCore`). Written under the pending table's send lock."""

    __slots__ = ()

    def sent_at(self) -> float:
        return self.resent_at or self.deadline - self.timeout

    def partition_key(self) -> PartitionKey:
        key = self.key
        if key is None:
            key = self.key = stream_and_partition(self.framed)
        return key

    def __repr__(self) -> str:
        return (
            f"Entry(correlation_id={self.correlation_id!r}, partition={self.partition}, "
            f"seq={self.seq}, deadline={self.deadline})"
        )


def new_entries(
    framed: list[bytes],
    ids: list[str],
    partition: int | list[int],
    wants_ack: bool,
    timeout: float,
    deadline: float,
) -> tuple[list[Entry], list[AckFuture]]:
    """An :class:`Entry` and a new future for each framed request (the same lengths),
    all to one ``partition``, or each to its own (a list of the same length), with one
    timeout and deadline. With the C speedups, built without running
    ``Entry.__init__`` (a third of a batched publish's caller CPU).
    """
    partitions = partition if isinstance(partition, list) else [partition] * len(framed)
    entries = [
        new_entry(request, correlation_id, chosen, wants_ack, timeout, deadline)
        for request, correlation_id, chosen in zip(framed, ids, partitions, strict=True)
    ]
    return entries, [entry.future for entry in entries]


def new_entry(
    framed: bytes,
    correlation_id: str,
    partition: int,
    wants_ack: bool,
    timeout: float,
    deadline: float,
) -> Entry:
    """An :class:`Entry` with a new future (``entry.future``), as :func:`new_entries`."""
    return Entry(framed, correlation_id, partition, wants_ack, PublishFuture(), timeout, deadline)


def frame_entry(
    head: bytes,
    value: bytes,
    prefix: str,
    n: int,
    max_size: int,
    partition: int,
    wants_ack: bool,
    timeout: float,
    deadline: float,
) -> Entry | None:
    """The :class:`Entry` (with a new future) of a value framed behind a cached
    ``head`` with the correlation id ``prefix`` + ``n``, as :func:`frame_id` and
    :func:`new_entry` would make it; ``None`` when the framed request is longer than
    ``max_size`` bytes. One call per ``publish_async`` with the C speedups."""
    framed, correlation_id = frame_id(head, value, prefix, n)
    if len(framed) > max_size:
        return None
    return new_entry(framed, correlation_id, partition, wants_ack, timeout, deadline)


def pop_answered(queue_: collections.deque[Entry], pending: dict[str, Entry]) -> bool:
    """Pop the answered entries (those no longer pending) off the head of a deadline
    queue, under the send lock; whether a pending entry is left at its head."""
    while queue_:
        entry = queue_[0]
        if pending.get(entry.correlation_id) is entry:
            return True
        queue_.popleft()
    return False


_py_new_entries = new_entries  # the pure-Python versions (the tests compare)
_py_new_entry = new_entry
_py_frame_entry = frame_entry
_py_pop_answered = pop_answered

if (
    speedups.make_entries is not None
    and speedups.make_entry is not None
    and speedups.frame_entry is not None
    and speedups.pop_answered is not None
    and speedups.setup_entries is not None
):
    speedups.setup_entries(Entry, PublishFuture)
    new_entries = speedups.make_entries  # noqa: F811 - the same functions, in C
    new_entry = speedups.make_entry  # noqa: F811
    frame_entry = speedups.frame_entry  # noqa: F811
    pop_answered = speedups.pop_answered  # noqa: F811


@dataclasses.dataclass(frozen=True, slots=True)
class Close:
    deadline: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Forwarded:
    """Responses the stream's thread left for the owner (failures, done-callbacks)."""

    epoch: int
    responses: list[Answer]


WAKE = object()  # a publish with an earlier deadline than the owner sleeps until
KICK = object()  # publishes are pending and no stream is open


def failure(entry: Entry, error: BaseException) -> Outcome:
    """The settle tuple that fails ``entry``'s future with ``error``."""
    return (entry.future, None, error)
