"""Where a publish goes and how long it may wait: partition choice and ack timeouts.

Functions of their arguments and the client's core (for the partition count): thread-safe.
"""

from __future__ import annotations

import inspect

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.requests import check_publish_stream
from liftbridge_sync._wire.validate import check_partition, check_timeout
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.partitioners import ByKey, Partitioner, key_partition

__all__ = ["BatchChooser", "choose_partition", "resolve_ack_timeout"]


def resolve_ack_timeout(timeout: float | None, default: float) -> float:
    """Seconds until an unacknowledged publish fails (``None``: ``default``).

    Raises:
        ConfigurationError: NaN, negative, zero, infinite or absurdly large.
    """
    if timeout is None:
        return default
    seconds = check_timeout("timeout", timeout, allow_zero=False)
    if seconds is None:
        raise ConfigurationError(
            "'timeout' must be finite: an ack that never comes must fail some time "
            "(None means the client's ack_timeout)"
        )
    return seconds


def choose_partition(
    core: ClientCore,
    stream: str,
    key: bytes | None,
    value: bytes,
    partition: int | None,
    partitioner: Partitioner | None,
) -> int:
    """The partition to publish to: ``partition``, the partitioner's choice, or 0.

    Raises:
        ConfigurationError: both given, a bad partition, a bad stream name (a
            partitioner given: before the partition count is asked for), or a
            partitioner that returns something other than a partition of the stream.
        NoSuchStreamError: a partitioner needs the partition count of a missing stream.
    """
    if partition is not None:
        if partitioner is not None:
            raise ConfigurationError("give either 'partition' or 'partitioner', not both")
        return check_partition("partition", partition)
    if partitioner is None:
        return 0
    _check_partitioner(partitioner)
    count = core.partition_count(check_publish_stream(stream))  # no bad name to the server
    return _checked_choice(partitioner, stream, key, value, count)


class BatchChooser:
    """:func:`choose_partition` for the items of one ``publish_batch``: the arguments
    are checked and the partition count read once, at the first item, for the whole
    batch (which is framed before any of it is sent).

    Not thread-safe: one per batch, used by the thread that frames it.
    """

    __slots__ = ("_by_key", "_core", "_count", "_partition", "_partitioner", "_stream")

    def __init__(
        self,
        core: ClientCore,
        stream: str,
        partition: int | None,
        partitioner: Partitioner | None,
    ) -> None:
        self._core = core
        self._stream = stream
        self._partition = partition
        self._partitioner = partitioner
        self._count = 0
        # The library's own ByKey answers a partition of the stream: no check of it.
        self._by_key = type(partitioner) is ByKey

    def __call__(self, key: bytes | None, value: bytes) -> int:
        """The partition of one item; raises like :func:`choose_partition`."""
        partitioner = self._partitioner
        if partitioner is None or self._partition is not None:
            return choose_partition(
                self._core, self._stream, key, value, self._partition, partitioner
            )
        count = self._count or self._counted()
        if self._by_key and count >= 1:
            # The library's own ByKey, inlined (what ByKey.partition computes): a method
            # call and its count check per item were a third of a keyed batch's routing
            # CPU, and a one-partition stream needs no hash at all.
            return 0 if count == 1 else key_partition(key, count)
        if self._by_key:  # a count below 1: ByKey raises the ConfigurationError
            return partitioner.partition(self._stream, key, value, count)
        return _checked_choice(partitioner, self._stream, key, value, count)

    def by_key_count(self) -> int | None:
        """The stream's partition count when every item's partition is the library's
        own :class:`~liftbridge_sync.partitioners.ByKey` choice (no fixed partition),
        so that a run of items can be routed without a call each; ``None`` otherwise,
        or for a count below 1 (the per-item call raises then). Raises like the first
        call would."""
        if not self._by_key or self._partition is not None:
            return None
        count = self._count or self._counted()
        return count if count >= 1 else None

    def _counted(self) -> int:
        """Check the partitioner and the stream once, and read the partition count."""
        _check_partitioner(self._partitioner)
        stream = check_publish_stream(self._stream)  # no bad name to the server
        count = self._count = self._core.partition_count(stream)
        return count


def _check_partitioner(partitioner: object) -> None:
    # Not isinstance(..., Partitioner): a runtime Protocol check costs ~3 µs per
    # publish and tests no more than this (that a callable ``partition`` exists).
    if isinstance(partitioner, str | bytes):
        # str.partition exists (and is called with four arguments: a bare TypeError).
        raise ArgumentTypeError(
            f"'partitioner' must be a partitioner such as ByKey() or RoundRobin(), not "
            f"{type(partitioner).__name__} {partitioner!r}"
        )
    if not callable(getattr(partitioner, "partition", None)):
        raise ArgumentTypeError(
            "'partitioner' must have partition(stream, key, value, partition_count), got "
            f"{type(partitioner).__name__}"
        )
    if isinstance(partitioner, type) and not isinstance(
        inspect.getattr_static(partitioner, "partition"), staticmethod | classmethod
    ):
        # partitioner=ByKey: its partition would be called unbound (a bare TypeError).
        name = partitioner.__name__
        raise ArgumentTypeError(
            f"'partitioner' must be a partitioner, not the class; pass {name}()"
        )


def _checked_choice(
    partitioner: Partitioner, stream: str, key: bytes | None, value: bytes, count: int
) -> int:
    chosen = partitioner.partition(stream, key, value, count)
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < count:
        raise ConfigurationError(
            f"partitioner returned {chosen!r}, not a partition of {stream!r} (0..{count - 1})"
        )
    return chosen
