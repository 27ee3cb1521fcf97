"""Sending publishes again without a new stream: refusals for now, and silent partitions.

Publishes the server could not hand to NATS, or refused as "no such stream" while it was
still starting (:mod:`.recovering`), are sent again after a back-off; partitions that went
silent are probed (:mod:`.failover`) and their silent publishes re-sent, provided that
everything queued before the probe has left this client's own queues (a publish still
queued here is not lost, and a copy would follow it). Publishes re-sent after a probe
that are proven lost again on the same stream are not re-sent on it a second time: its
acks are taken for lost, and the stream is retired (:mod:`.connection`). A broken stream
needs none of this: the next stream re-sends everything pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from liftbridge_sync._publishing.failover import LeaderProbe, PartitionKey, ProbeResult
from liftbridge_sync._publishing.pending import INF, Entry
from liftbridge_sync._publishing.recovering import RecoveringPartitions
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.publish_stream import PublishStream
from liftbridge_sync._transport.retry import backoff_delay
from liftbridge_sync._wire.publish_codec import Answer, Refusal, answers_another_stream

__all__ = ["IDLE_PROOF", "Resender"]

_log = logging.getLogger("liftbridge_sync.publisher")

#: How many ``resend_after`` periods a silent partition's leader must stay idle and
#: committed before its silence alone counts as trouble (3 s by default): long enough
#: that a merely slow machine shows the log moving, short of the 30 s ack timeout.
IDLE_PROOF = 3


class Resender:
    """Refused and silent publishes, sent again on the live stream.

    Owner-thread only, but for :meth:`disrupted` and the counters (plain reads).
    """

    def __init__(
        self,
        core: ClientCore,
        table: PendingTable,
        wake_owner: Callable[[object], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table = table
        self._retry = core.options.retry
        self._clock = clock
        self._resend_after = core.options.resend_after
        self._probe = LeaderProbe(core, wake_owner, clock=clock)
        self._probing: set[PartitionKey] = set()
        #: Silent partitions with trouble seen (see failover); re-sent once idle.
        self._troubled: set[PartitionKey] = set()
        #: The leader each silent partition had when its silence was first probed.
        self._silent_leaders: dict[PartitionKey, str | None] = {}
        #: Since when each silent partition's leader has been seen idle and committed.
        self._idle_since: dict[PartitionKey, float] = {}
        #: For each probe under way, the last sequence number among its partition's
        #: silent publishes; replaced whole (the stream's thread reads it, see
        #: saw_answers). Empty but while a partition is probed: answers are then not
        #: looked at.
        self.watching: dict[PartitionKey, int] = {}
        #: For each silent partition whose publishes were re-sent after a probe: the
        #: stream they went on, and their ids, each with when it was re-sent then (see
        #: on_probe_result).
        self._resent_on: dict[PartitionKey, tuple[PublishStream, dict[str, float]]] = {}
        #: Partitions probed that acknowledged a publish sent after their silent ones.
        self._overtaken: set[PartitionKey] = set()
        #: The live stream and its queued mark when each probe under way was asked for.
        self._marks: dict[PartitionKey, tuple[PublishStream, int]] = {}
        #: Streams draining (see connection): the ids of the publishes each was sent,
        #: and its final queued mark (nothing is queued on it after the drain began).
        self._draining: dict[PublishStream, tuple[Collection[str], int]] = {}
        #: When the stream last broke or a broker last refused for want of NATS.
        self._disrupted_at = -INF
        #: When the stream last broke (see RecoveringPartitions).
        self._broke_at = -INF
        self._next_stall_check = 0.0
        #: Publishes the server could not hand to NATS, to send again at the time below,
        #: each with when it had last been re-sent as the refusal came (see refused).
        self._refused: list[tuple[Entry, float]] = []
        self._resend_refused_at: float | None = None
        self._refusals = 0  # consecutive rounds of such refusals (for the back-off)
        #: NOT_FOUND refusals from brokers still rebuilding their streams.
        self._recovering = RecoveringPartitions(
            core, self._probe.refresh, self._probe.forget, lambda: self._broke_at
        )
        self.resent_after_stall = 0
        self.resent_after_refusal = 0
        self.stall_probes = 0

    @property
    def resend_refused_at(self) -> float | None:
        """When refused publishes are due to go again (``None``: none are)."""
        return self._resend_refused_at

    def draining(self, stream: PublishStream, ids: Collection[str], mark: int) -> None:
        """``stream`` drains: it still writes what it was queued, up to ``mark``."""
        self._draining[stream] = (ids, mark)

    def drained(self, stream: PublishStream) -> None:
        """A draining stream ended."""
        self._draining.pop(stream, None)

    def disrupted(self) -> None:
        """The stream broke: trouble for every partition silent since shortly before."""
        self._disrupted_at = self._broke_at = self._clock()

    # -- refusals ---------------------------------------------------------------------

    def still_starting(self, correlation_id: str) -> bool:
        """Whether a NOT_FOUND refusal of this publish came from a broker that has not
        rebuilt its streams yet (see :mod:`.recovering`)."""
        entry = self._table.entries.get(correlation_id)
        if entry is None:
            return False
        return self._recovering.send_again(entry.partition_key(), self._clock())

    def refused(self, entry: Entry) -> None:
        """The server did not store ``entry`` for now: it goes again shortly (its own
        deadline still bounds it)."""
        self._refused.append((entry, entry.resent_at))
        self._disrupted_at = self._clock()

    def answers_handled(self) -> None:
        """After a batch of answers: schedule what was refused, with back-off."""
        if not self._refused:
            self._refusals = 0
        elif self._resend_refused_at is None:
            self._refusals += 1
            delay = backoff_delay(self._retry, self._refusals)
            self._resend_refused_at = self._clock() + delay

    def resend_refused(self) -> None:
        """Send again, in order, what the server refused for now (could not hand to NATS,
        or did not serve yet: :mod:`.recovering`)."""
        refused, self._refused = self._refused, []
        self._resend_refused_at = None
        pending = self._table.entries

        def still_pending() -> list[Entry]:
            # Once each, and not if sent again since it was refused (a stall re-send, a
            # new stream): that copy is on its way and answers for itself. A copy per
            # refusal would store the message as often once the server takes it.
            entries = {
                e.correlation_id: e
                for e, resent_at in refused
                if pending.get(e.correlation_id) is e and e.resent_at == resent_at
            }
            return sorted(entries.values(), key=lambda e: e.seq)

        count = self._table.send_again(still_pending)
        if not count:
            if self._table.live is None:
                # Between streams (a back-off): kept for the next one, which re-sends
                # what is pending but not what a draining stream still holds; a refused
                # publish held there would wait for that stream's end, or its deadline.
                kept = [(e, at) for e, at in refused if pending.get(e.correlation_id) is e]
                self._refused = kept + self._refused
                self.answers_handled()
            return
        self.resent_after_refusal += count
        _log.warning(
            "the server refused %d publishes for now (its NATS connection is down, or it "
            "is still rebuilding its streams after a restart); sent them again",
            count,
        )

    # -- silences ---------------------------------------------------------------------

    def watch_stalls(self, now: float, connected: bool) -> float | None:
        """Probe partitions whose publishes went silent; when to look again."""
        resend_after = self._resend_after
        pending = self._table.entries
        if resend_after is None or not pending or not connected:
            if not pending:
                self._forget_silences()
            return None
        if now < self._next_stall_check:
            return self._next_stall_check
        try:
            oldest = next(iter(pending.values()))
        except (StopIteration, RuntimeError):  # emptied or changed by the stream's thread
            return None
        due = oldest.sent_at() + resend_after
        if due > now and not self._probing:
            # Re-sent entries are not in send order, so this is a lower bound; the scan
            # below looks at them all once something is silent.
            self._forget_silences()
            self._next_stall_check = due
            return due
        cutoff = now - resend_after
        first_sent: dict[PartitionKey, float] = {}
        last_seq: dict[PartitionKey, int] = {}
        for entry in list(pending.values()):
            if entry.wants_ack and entry.sent_at() <= cutoff:
                key = entry.partition_key()
                sent = entry.deadline - entry.timeout
                if sent < first_sent.get(key, INF):
                    first_sent[key] = sent
                if entry.seq > last_seq.get(key, -1):
                    last_seq[key] = entry.seq
        silent = set(first_sent)
        # Trouble counts for the silence it may explain: a broken stream or a refusal
        # since (or just before) the partition's oldest silent publish was sent.
        self._forget_silences(keep=silent)
        for key, sent in first_sent.items():
            if self._disrupted_at >= sent - resend_after:
                self._troubled.add(key)
        stream = self._table.live
        for key in silent - self._probing:
            self._probing.add(key)
            self.stall_probes += 1
            self._overtaken.discard(key)
            self.watching = {**self.watching, key: last_seq[key]}
            if stream is not None:
                self._marks[key] = (stream, stream.queued_mark())
            self._probe.request(key, now)
        # While a partition is silent, look again now and then (not on every event).
        self._next_stall_check = now + min(resend_after, 0.25)
        return self._next_stall_check

    def _forget_silences(self, keep: Collection[PartitionKey] = ()) -> None:
        """Forget what past silences left (trouble seen, the leader then, since when it
        was idle, the copies re-sent) of every partition but those still silent
        (``keep``): it must not count for a partition's next silence, which would
        otherwise be taken for proven on its first probe, skipping the IDLE_PROOF wait
        that keeps merely slow publishes from being stored twice."""
        if not (self._troubled or self._silent_leaders or self._idle_since or self._resent_on):
            return  # the common case, on the owner loop's every turn
        self._troubled.intersection_update(keep)
        for state in (self._silent_leaders, self._idle_since, self._resent_on):
            for key in [k for k in state if k not in keep]:
                del state[key]

    def saw_answers(self, answers: Sequence[Answer], pending: Mapping[str, Entry]) -> None:
        """Note the probed partitions that acknowledged a publish sent after their
        silent ones (called with a batch of answers before they are resolved, only
        while :attr:`watching`; on the stream's thread or the owner's). An ack of
        another stream sharing the subject proves nothing of this one's leader."""
        watching = self.watching
        for answer in answers:
            if isinstance(answer, Refusal):
                continue
            entry = pending.get(answer.correlation_id)
            if entry is None or answers_another_stream(answer.stream, entry.framed):
                continue
            key = entry.partition_key()
            last = watching.get(key)
            if last is not None and entry.seq > last:
                self._overtaken.add(key)

    def on_probe_result(self, result: ProbeResult) -> bool:
        """Take a probe's verdict: re-send the partition's silent publishes if they are
        proven lost. ``True``: the live stream's acks are lost, and it is to be replaced
        (publishes re-sent on it after a probe went silent again, and were proven lost
        again: re-sending on it once more would store them once more, as in a CI run
        where a broker's ack route stayed broken after a NATS restart while the leader
        stored every copy)."""
        self._probing.discard(result.key)
        mark = self._marks.pop(result.key, None)
        if result.trouble:
            self._troubled.add(result.key)
        last_silent = self.watching.get(result.key)
        self.watching = {k: v for k, v in self.watching.items() if k != result.key}
        # A leader answers a partition's publishes in the order it receives them, and
        # it acknowledged one this client sent after the silent ones while they wait:
        # they never reached it (a new leader not yet listening on the partition's
        # subject), or their acks were lost. With its log fully committed, none of them
        # waits for replication either. Only those silent ones are proven lost: the
        # answer may have come in its turn after all of them, and later publishes
        # merely slow (a loaded machine) would be stored twice.
        overtaken = (
            result.committed
            and result.key in self._overtaken
            and last_silent is not None
            and self._still_pending(result.key, last_silent)
        )
        self._overtaken.discard(result.key)
        if overtaken:
            self._troubled.add(result.key)
        if result.idle and self._resend_after is not None:
            # A leader that stays idle and fully committed while publishes sent to it
            # wait is proof enough that they were lost where the client could not see
            # it: the leader restarted fast and kept the lead, or the NATS route to it
            # was cut, while this client's stream stayed up on another broker.
            since = self._idle_since.setdefault(result.key, result.started)
            if self._clock() - since >= IDLE_PROOF * self._resend_after:
                self._troubled.add(result.key)
        # The leader the client knew when this silence began (see failover).
        before = self._silent_leaders.setdefault(result.key, result.known_leader)
        moved = result.leader is not None and before is not None and result.leader != before
        ready = result.idle or (moved and result.committed) or overtaken
        # Overtaking alone proves no more than the publishes it overtook.
        up_to = last_silent if overtaken and not result.idle and not moved else None
        if not (ready and result.key in self._troubled):
            _log.debug("partition %s/%d is silent: %s", *result.key, result.detail)
            return False
        if (
            mark is not None
            and mark[0] is self._table.live
            and not mark[0].written_through(mark[1])
        ):
            # Requests queued before the probe are still in this client's own queues:
            # the silence may be ours, and a copy sent now would follow the first one
            # (stored twice). Looked at again with the next probe.
            _log.debug("partition %s/%d is silent, but not all was written yet", *result.key)
            return False
        pending = self._table.entries
        live = self._table.live
        if self._lost_again(result.key, live):
            _log.warning(
                "partition %s/%d went silent again (%s) after its publishes were re-sent "
                "on this stream",
                *result.key,
                result.detail,
            )
            del self._resent_on[result.key]
            return True
        # Likewise those still in the queue of a draining stream, which writes them yet.
        queued: set[str] = set()
        for old, (ids, end) in self._draining.items():
            if not old.written_through(end):
                queued.update(ids)

        picked: list[Entry] = []

        def silent() -> list[Entry]:
            # A snapshot first (one C call): threads settling acks remove entries
            # without the send lock, and a dict that shrinks under a Python loop over
            # it raises, which would kill the publisher thread.
            picked[:] = [
                e
                for e in list(pending.values())
                if e.wants_ack
                and e.sent_at() <= result.started
                and e.partition_key() == result.key
                and e.correlation_id not in queued
                and (up_to is None or e.seq <= up_to)
            ]
            return picked

        count = self._table.send_again(silent)
        if not count:
            return False
        if live is not None:
            # These copies only: a publish of the partition sent on the stream since for
            # another reason (a refusal's re-send, a drained stream's leftovers) says
            # nothing of its acks (a refusal is an answer).
            self._resent_on[result.key] = (live, {e.correlation_id: e.resent_at for e in picked})
        self.resent_after_stall += count
        self._next_stall_check = self._clock() + (self._resend_after or 0.0)
        _log.warning(
            "partition %s/%d went silent (%s); re-sent %d unacknowledged publishes",
            *result.key,
            result.detail,
            count,
        )
        return False

    def _lost_again(self, key: PartitionKey, live: PublishStream | None) -> bool:
        """Whether a copy of ``key``'s publishes re-sent on ``live`` after a probe still
        waits unanswered (neither acknowledged, nor refused, nor sent again since)."""
        resent = self._resent_on.get(key)
        if resent is None or live is None or resent[0] is not live:
            return False
        pending = self._table.entries
        refused = {e.correlation_id for e, _ in self._refused}
        # get(): threads settling acks remove entries meanwhile.
        return any(
            (e := pending.get(i)) is not None and e.resent_at == at and i not in refused
            for i, at in resent[1].items()
        )

    def _still_pending(self, key: PartitionKey, last_seq: int) -> bool:
        """Whether a publish of ``key`` numbered ``last_seq`` or lower still waits."""
        # A snapshot (one C call): threads settling acks remove entries meanwhile.
        return any(
            e.seq <= last_seq and e.wants_ack and e.partition_key() == key
            for e in list(self._table.entries.values())
        )

    def close(self, wait: float | None = None) -> None:
        """Stop the leader probe, waiting ``wait`` seconds at most (see
        :meth:`~.failover.LeaderProbe.close`)."""
        self._probe.close(wait)
