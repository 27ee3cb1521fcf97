"""Publishes refused with "no such stream" by a broker that is still starting.

A Liftbridge v1.9.0 broker serves its API before it has rebuilt its streams: for 0.5 to
3 s after a (re)start it answers publishes with NOT_FOUND ("no such stream" / "no such
partition") while the cluster's metadata still lists the stream. Such a refusal stored
nothing, so the publisher sends the publish again after a back-off, as it does when a
broker's NATS connection is down, for as long as the client's metadata lists the
partition and at most the retry policy's ``max_delay`` into a run of such refusals.
A stream that is really gone fails with :class:`~liftbridge_sync.errors.NoSuchStreamError`
(at once when the metadata lacks it, else once the run is over), as the subscribe path
decides "the server is recovering it".
"""

from __future__ import annotations

from liftbridge_sync._publishing.failover import PartitionKey
from liftbridge_sync._transport.core import ClientCore

__all__ = ["NOT_FOUND", "RecoveringPartitions"]

#: ``PublishAsyncError.Code.NOT_FOUND``.
NOT_FOUND = 2


class RecoveringPartitions:
    """Runs of NOT_FOUND refusals per partition, and whether to send again.

    Owner thread only (not thread-safe).
    """

    def __init__(self, core: ClientCore) -> None:
        self._core = core
        retry = core.options.retry
        self._bound = retry.max_delay
        #: Refusals further apart than this start a new run (re-sends come at most
        #: the largest back-off apart).
        self._gap = retry.maximum + retry.jitter + 1.0
        self._runs: dict[PartitionKey, tuple[float, float]] = {}  # key -> (first, last)

    def send_again(self, key: PartitionKey, now: float) -> bool:
        """Whether a NOT_FOUND refusal for ``key`` at ``now`` is a broker still starting
        (send the publish again) rather than a missing stream (fail it)."""
        snapshot = self._core.metadata.snapshot
        if snapshot is None or snapshot.partition(*key) is None:
            return False
        first, last = self._runs.get(key, (now, now))
        if now - last > self._gap:
            first = now
        self._runs[key] = (first, now)
        if len(self._runs) > 1024:  # old runs of partitions long since served
            self._runs = {k: v for k, v in self._runs.items() if now - v[1] <= self._gap}
        return now - first < self._bound
