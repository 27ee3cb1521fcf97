"""Publishes refused with "no such stream" by a broker that is still starting.

A Liftbridge v1.9.0 broker serves its API before it has rebuilt its streams: for 0.5 to
3 s after a (re)start it answers publishes with NOT_FOUND ("no such stream" / "no such
partition") while the cluster's metadata still lists the stream. Such a refusal stored
nothing, so the publisher sends the publish again after a back-off, as it does when a
broker's NATS connection is down, for as long as the client's metadata lists the
partition and at most the retry policy's ``max_delay`` into a run of such refusals.
A client without metadata for the stream fetches it (on the probe thread) and sends
again meanwhile. A stream that is really gone fails with
:class:`~liftbridge_sync.errors.NoSuchStreamError` (as soon as the metadata lacks it,
else once the run is over), as the subscribe path decides "the server is recovering
it". Except shortly after the publish stream broke: a lone broker that restarted
answers the metadata request from the same unrebuilt state, without the stream, so
then an answer lacking it counts for nothing and the run's bound decides. A run that
is over has the stream fetched again and dropped from the metadata unless the answer
has it: a stream deleted by another client stayed listed, so every later publish to it
waited out a run of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from liftbridge_sync._publishing.failover import PartitionKey
from liftbridge_sync._transport.core import ClientCore

__all__ = ["NOT_FOUND", "RecoveringPartitions"]

#: ``PublishAsyncError.Code.NOT_FOUND``.
NOT_FOUND = 2
#: Seconds a metadata refresh asked for may take (the probe's bound on one look).
_ANSWER_WITHIN = 2.5


class RecoveringPartitions:
    """Runs of NOT_FOUND refusals per partition, and whether to send again.

    Owner thread only (not thread-safe).
    """

    def __init__(
        self,
        core: ClientCore,
        refresh: Callable[[str], None],
        forget: Callable[[str], None],
        broke_at: Callable[[], float],
    ) -> None:
        self._core = core
        self._broke_at = broke_at  # when the publish stream last broke (clock of `now`)
        self._refresh = refresh  # fetches a stream's metadata off this thread
        self._forget = forget  # the same, dropping the stream unless the answer has it
        retry = core.options.retry
        self._bound = retry.max_delay
        #: Refusals further apart than this start a new run (re-sends come at most
        #: the largest back-off apart).
        self._gap = retry.maximum + retry.jitter + 1.0
        self._runs: dict[PartitionKey, tuple[float, float]] = {}  # key -> (first, last)
        self._asked: dict[str, float] = {}  # stream -> when its metadata was asked for

    def send_again(self, key: PartitionKey, now: float) -> bool:
        """Whether a NOT_FOUND refusal for ``key`` at ``now`` is a broker still starting
        (send the publish again) rather than a missing stream (fail it)."""
        snapshot = self._core.metadata.snapshot
        if snapshot is None or key[0] not in snapshot.streams:
            # The client may never have looked (a publish to an explicit partition needs
            # no metadata): ask once, off this thread, and send again until the answer
            # is in; a stream still missing from it is missing.
            # (Monotonic time, as the metadata's own ``fetched_at``.)
            moment = time.monotonic()
            asked = self._asked.get(key[0])
            if asked is None or moment - asked > 4 * _ANSWER_WITHIN:
                if len(self._asked) > 1024:
                    self._asked.clear()
                self._asked[key[0]] = moment
                self._refresh(key[0])
                return True
            answered = snapshot is not None and snapshot.fetched_at > asked
            if not answered and moment - asked < _ANSWER_WITHIN:
                return True
            if now - self._broke_at() >= self._bound:
                return False
            # The stream broke lately: the broker that lacks the stream may be a lone
            # one still rebuilding its streams, and its metadata lacks them as well.
        elif snapshot.partition(*key) is None:
            return False
        first, last = self._runs.get(key, (now, now))
        if now - last > self._gap:
            first = now
        self._runs[key] = (first, now)
        if len(self._runs) > 1024:  # old runs of partitions long since served
            self._runs = {k: v for k, v in self._runs.items() if now - v[1] <= self._gap}
        if now - first < self._bound:
            return True
        # Refused for longer than any restart takes: deleted. The next publish then
        # finds the stream unknown and fails as soon as a fresh answer lacks it.
        self._forget(key[0])
        return False
