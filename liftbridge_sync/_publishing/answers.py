"""What the server answers, and what the publisher does when it does not answer.

Acks arrive on the stream's thread: plain successes of futures without done-callbacks
are resolved right there (a waiting ``publish()`` wakes without a hop), everything else
goes to the owner thread, which resolves futures in bulk. Publishes the server could
not hand to NATS, or refused as "no such stream" while it was still starting
(:mod:`.recovering`), are sent again after a back-off; partitions that went silent are
probed (:mod:`.failover`) and their silent publishes re-sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from liftbridge_sync._publishing.failover import PartitionKey, ProbeResult
from liftbridge_sync._publishing.futures import (
    NO_CALLBACKS,
    PublishFuture,
    settle,
    settle_acks,
    settle_plain,
    take_acks,
)
from liftbridge_sync._publishing.owner import OwnerLoop
from liftbridge_sync._publishing.pending import (
    INF,
    Entry,
    Forwarded,
    Outcome,
    failure,
)
from liftbridge_sync._publishing.recovering import NOT_FOUND
from liftbridge_sync._transport.publish_stream import (
    StreamResponse,
    StreamResponses,
)
from liftbridge_sync._transport.retry import backoff_delay
from liftbridge_sync._wire.publish_codec import Answer, Refusal, set_ack_partition
from liftbridge_sync.models import Ack

__all__ = ["AnswerHandling"]

_log = logging.getLogger("liftbridge_sync.publisher")


#: How many ``resend_after`` periods a silent partition's leader must stay idle and
#: committed before its silence alone counts as trouble (3 s by default): long enough
#: that a merely slow machine shows the log moving, short of the 30 s ack timeout.
IDLE_PROOF = 3


class AnswerHandling(OwnerLoop):
    """Acks, refusals and silences. Runs on the stream's and the owner's threads."""

    def _on_stream_event(self, event: object) -> None:
        """Stream events arrive here on the stream's thread.

        Plain acks of futures without done-callbacks are resolved right here (a
        ``publish()`` waiting for one wakes without a hop through the publisher thread);
        everything else goes to the publisher thread's inbox.
        """
        responses: Sequence[Answer]
        if type(event) is StreamResponses and event.epoch == self._epoch:
            responses = event.responses
        elif type(event) is StreamResponse and event.epoch == self._epoch:
            responses = [event.response]
        else:
            self._inbox.put(event)
            return
        self._failures = 0  # the stream works (reconnect back-off starts afresh)
        if self._unsent_from is not None:
            self._reached(event.epoch)
        rest = self._resolve_plain(responses)
        if rest:
            # Only this (the current stream's) thread counts up, only the owner down.
            self._forwarded += 1
            self._inbox.put(Forwarded(event.epoch, rest))

    def _reached(self, epoch: int) -> None:
        """The first answer on a stream that could not tell it reached a broker (grpc):
        what it was sent was written (see :meth:`_fail_unsent`)."""
        with self._send_lock:
            if epoch == self._epoch and self._live is not None:
                self._unsent_from = None

    def _resolve_plain(self, responses: Sequence[Answer]) -> list[Answer]:
        """Resolve successful acks of callback-less futures; the responses left over."""
        if self._forwarded != self._handled:
            # The owner has responses of this stream still to handle: keep the order
            # (an error and then an ack for the same message must be seen in turn).
            return list(responses)
        pending = self._pending
        # C speedups: the leading run of plain acks resolved in one call.
        taken_now = settle_acks(responses, pending) if type(responses) is list else 0
        if taken_now:
            self._wake_waiters()
            self._drop_answered()
            if taken_now == len(responses):
                return []
            responses = responses[taken_now:]
        rest: list[Answer] = []
        taken: list[tuple[Entry, Answer]] = []
        outcomes: list[tuple[PublishFuture[Any], Any]] = []
        for index, response in enumerate(responses):
            # The first response left to the owner takes everything after it along
            # (in order), in one step rather than one look per response.
            if isinstance(response, Refusal):
                rest.extend(responses[index:])
                break
            entry = pending.get(response.correlation_id)
            if entry is None or entry.future._done_callbacks is not NO_CALLBACKS:
                rest.extend(responses[index:])
                break
            set_ack_partition(response, entry.partition)
            taken.append((entry, response))
            outcomes.append((entry.future, response))
        if outcomes:
            # Resolve first (the future's state decides who did: the owner may be timing
            # it out right now), then take the entries out of the pending table.
            skipped = settle_plain(outcomes)
            for i in skipped:
                rest.append(taken[i][1])  # a callback was added meanwhile: the owner
            if skipped:
                taken = [t for i, t in enumerate(taken) if i not in set(skipped)]
            for entry, _ in taken:
                if pending.get(entry.correlation_id) is entry:
                    pending.pop(entry.correlation_id, None)
            self._wake_waiters()
            self._drop_answered()
        return rest

    def _on_responses(self, responses: Sequence[Answer]) -> None:
        pending = self._pending
        # C speedups: the leading run of plain acks popped and resolved in one call;
        # their callbacks run in settle() below, first.
        taken_now, resolved = take_acks(responses, pending) if type(responses) is list else (0, [])
        if taken_now:
            responses = responses[taken_now:]
        outcomes: list[Outcome] = []
        append = outcomes.append
        for response in responses:
            if type(response) is Ack:
                # A PERMISSION_DENIED error can be followed by an ack for the same id
                # (server quirk): the entry is gone by then, so the ack is ignored.
                entry = pending.pop(response.correlation_id, None)
                if entry is not None:
                    set_ack_partition(response, entry.partition)
                    append((entry.future, response, None))
                continue
            assert isinstance(response, Refusal)
            correlation_id = response.correlation_id
            if response.transient or (
                response.async_code == NOT_FOUND and self._still_starting(correlation_id)
            ):
                # Not stored: stays pending and goes again shortly (its own deadline
                # still bounds it).
                entry = pending.get(correlation_id)
                if entry is not None:
                    self._refused.append(entry)
                    self._disrupted_at = self._clock()
                continue
            entry = pending.pop(correlation_id, None)
            if entry is not None:
                outcomes.append(failure(entry, response.error))
        if outcomes or taken_now:
            settle(outcomes, self._failures_ledger, resolved)
            self._wake_waiters()
        if not self._refused:
            self._refusals = 0
        elif self._resend_refused_at is None:
            self._refusals += 1
            delay = backoff_delay(self._options.retry, self._refusals)
            self._resend_refused_at = self._clock() + delay

    def _still_starting(self, correlation_id: str) -> bool:
        """Whether a NOT_FOUND refusal of this publish came from a broker that has not
        rebuilt its streams yet (see :mod:`.recovering`)."""
        entry = self._pending.get(correlation_id)
        if entry is None:
            return False
        return self._recovering.send_again(entry.partition_key(), self._clock())

    def _watch_stalls(self, now: float) -> float | None:
        """Probe partitions whose publishes went silent; when to look again."""
        resend_after = self._resend_after
        pending = self._pending
        if resend_after is None or not pending or self._stream is None:
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
            self._next_stall_check = due
            return due
        cutoff = now - resend_after
        first_sent: dict[PartitionKey, float] = {}
        for entry in list(pending.values()):
            if entry.wants_ack and entry.sent_at() <= cutoff:
                key = entry.partition_key()
                sent = entry.deadline - entry.timeout
                if sent < first_sent.get(key, INF):
                    first_sent[key] = sent
        silent = set(first_sent)
        # Trouble counts for the silence it may explain: a broken stream or a refusal
        # since (or just before) the partition's oldest silent publish was sent.
        self._troubled &= silent
        for key in [k for k in self._silent_leaders if k not in silent]:
            del self._silent_leaders[key]
        for key in [k for k in self._idle_since if k not in silent]:
            del self._idle_since[key]
        for key, sent in first_sent.items():
            if self._disrupted_at >= sent - resend_after:
                self._troubled.add(key)
        for key in silent - self._probing:
            self._probing.add(key)
            self._stall_probes += 1
            self._probe.request(key, now)
        # While a partition is silent, look again now and then (not on every event).
        self._next_stall_check = now + min(resend_after, 0.25)
        return self._next_stall_check

    def _on_probe_result(self, result: ProbeResult) -> None:
        self._probing.discard(result.key)
        if result.trouble:
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
        ready = result.idle or (moved and result.committed)
        if not (ready and result.key in self._troubled):
            _log.debug("partition %s/%d is silent: %s", *result.key, result.detail)
            return

        def silent() -> list[Entry]:
            return [
                e
                for e in self._pending.values()
                if e.wants_ack and e.sent_at() <= result.started and e.partition_key() == result.key
            ]

        count = self._send_again(silent)
        if not count:
            return
        self._resent_after_stall += count
        self._next_stall_check = self._clock() + (self._resend_after or 0.0)
        _log.warning(
            "partition %s/%d went silent (%s); re-sent %d unacknowledged publishes",
            *result.key,
            result.detail,
            count,
        )

    def _resend_refused(self) -> None:
        """Send again, in order, what the server refused for now (could not hand to NATS,
        or did not serve yet: :mod:`.recovering`)."""
        refused, self._refused = self._refused, []
        self._resend_refused_at = None

        def still_pending() -> list[Entry]:
            entries = [e for e in refused if self._pending.get(e.correlation_id) is e]
            return sorted(entries, key=lambda e: e.seq)

        count = self._send_again(still_pending)
        if not count:
            return
        self._resent_after_refusal += count
        _log.warning(
            "the server refused %d publishes for now (its NATS connection is down, or it "
            "is still rebuilding its streams after a restart); sent them again",
            count,
        )

    def _send_again(self, pick: Callable[[], list[Entry]]) -> int:
        """Send again, in the order given, the pending entries ``pick`` chooses (called
        under the send lock); how many. None without a live stream: the next stream
        re-sends everything pending anyway."""
        with self._send_lock:
            stream = self._live
            if stream is None:
                return 0
            entries = pick()
            if entries:
                stream.send_many([e.framed for e in entries])
                now = self._clock()
                for entry in entries:
                    entry.resent_at = now
        return len(entries)
