"""Ack routing: what the server answers, to the futures of the pending publishes.

Acks arrive on the stream's thread: plain successes of futures without done-callbacks
are resolved right there (a waiting ``publish()`` wakes without a hop), everything else
goes to the owner thread, which resolves futures in bulk. Refusals for now go to the
:class:`~.resending.Resender`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from liftbridge_sync._publishing.futures import (
    NO_CALLBACKS,
    PublishFuture,
    settle,
    settle_acks,
    settle_plain,
    take_acks,
)
from liftbridge_sync._publishing.pending import (
    Entry,
    FailureLedger,
    Outcome,
    failure,
)
from liftbridge_sync._publishing.recovering import NOT_FOUND
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._wire.publish_codec import (
    Answer,
    Refusal,
    answers_another_stream,
    set_ack_partition,
)
from liftbridge_sync.models import Ack

__all__ = ["AckRouter"]

_log = logging.getLogger("liftbridge_sync.publisher")
#: Seconds between two warnings about refusals nothing waits for (see
#: :meth:`AckRouter.unclaimed`).
UNCLAIMED_LOG_EVERY = 10.0


class AckRouter:
    """Answers to futures. :meth:`resolve_plain` runs on the stream's thread,
    :meth:`on_responses` on the owner thread; the two keep the answers' order between
    them (see :meth:`resolve_plain`)."""

    def __init__(
        self,
        table: PendingTable,
        resender: Resender,
        ledger: FailureLedger,
        wake_waiters: Callable[[], None],
    ) -> None:
        self._table = table
        self._resender = resender
        self._ledger = ledger
        self._wake_waiters = wake_waiters
        #: Response batches the stream's thread handed to the owner, and those the owner
        #: has handled (each counter has one writer); the stream's thread resolves acks
        #: itself only while they are equal.
        self._forwarded = 0
        self._handled = 0
        #: Refusals of publishes nothing waits for, since the last one was logged, and
        #: when that was (see :meth:`unclaimed`).
        self._unclaimed = 0
        self._unclaimed_logged = -math.inf
        self._unclaimed_lock = threading.Lock()

    def unclaimed(self, refusal: Refusal) -> None:
        """A refusal of a publish nothing waits for any more: mostly an
        ``AckPolicy.NONE`` publish (resolved once written; the broker refuses those too,
        e.g. every one on a stream with optimistic concurrency), whose message is then
        lost. Said in a WARNING rather than dropped: the first at once, then at most one
        every :data:`UNCLAIMED_LOG_EVERY` seconds with how many came meanwhile (a broker
        sending them in a flood does not flood the log). Any thread."""
        with self._unclaimed_lock:
            self._unclaimed += 1
            now = time.monotonic()
            if now - self._unclaimed_logged < UNCLAIMED_LOG_EVERY:
                return
            count, self._unclaimed = self._unclaimed, 0
            self._unclaimed_logged = now
        _log.warning(
            "the broker refused %d publish(es) nothing waits for any more (AckPolicy.NONE "
            "publishes, ones failed before, or copies sent again after the first was "
            "answered); the last, %s: %s",
            count,
            refusal.correlation_id,
            refusal.error,
        )

    def forwarded(self) -> None:
        """The stream's thread handed the rest of a batch to the owner thread (only the
        current stream's thread calls this)."""
        self._forwarded += 1

    def handled(self) -> None:
        """The owner thread is done with a batch the stream's thread handed it."""
        self._handled += 1

    def resolve_plain(self, responses: Sequence[Answer]) -> list[Answer]:
        """Resolve successful acks of callback-less futures; the responses left over."""
        if self._forwarded != self._handled:
            # The owner has responses of this stream still to handle: keep the order
            # (an error and then an ack for the same message must be seen in turn).
            return list(responses)
        pending = self._table.entries
        if self._resender.watching:  # a silent partition is being probed
            self._resender.saw_answers(responses, pending)
        # C speedups: the leading run of plain acks resolved in one call.
        taken_now = settle_acks(responses, pending) if type(responses) is list else 0
        if taken_now:
            self._wake_waiters()
            self._table.drop_answered()
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
            if answers_another_stream(response.stream, entry.framed):
                continue  # another stream on the same subject: not this publish's ack
            set_ack_partition(response, entry.partition)
            taken.append((entry, response))
            outcomes.append((entry.future, response))
        if outcomes:

            def take_out(skipped: list[int]) -> None:
                # Before the callers wake: a caller that publishes again at once with
                # the same correlation id must not find its old entry still in place.
                left = set(skipped)
                for i, (entry, _) in enumerate(taken):
                    if i not in left and pending.get(entry.correlation_id) is entry:
                        pending.pop(entry.correlation_id, None)

            # Resolve first (the future's state decides who did: the owner may be timing
            # it out right now), then take the entries out of the pending table.
            skipped = settle_plain(outcomes, before_waking=take_out)
            for i in skipped:
                rest.append(taken[i][1])  # a callback was added meanwhile: the owner
            self._wake_waiters()
            self._table.drop_answered()
        return rest

    def on_responses(self, responses: Sequence[Answer]) -> None:
        pending = self._table.entries
        if self._resender.watching:  # a silent partition is being probed
            self._resender.saw_answers(responses, pending)
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
                entry = pending.get(response.correlation_id)
                # Another stream on the same subject acks the publish too: not its ack.
                if entry is not None and not answers_another_stream(response.stream, entry.framed):
                    # The I/O thread may have taken it meanwhile (it pops without a lock).
                    entry = pending.pop(response.correlation_id, None)
                    if entry is not None:
                        set_ack_partition(response, entry.partition)
                        append((entry.future, response, None))
                continue
            assert isinstance(response, Refusal)
            correlation_id = response.correlation_id
            if response.transient or (
                response.async_code == NOT_FOUND and self._resender.still_starting(correlation_id)
            ):
                # Not stored: stays pending and goes again shortly (its own deadline
                # still bounds it).
                entry = pending.get(correlation_id)
                if entry is not None:
                    self._resender.refused(entry)
                continue
            entry = pending.get(correlation_id)
            if entry is not None and answers_another_stream(response.stream, entry.framed):
                continue  # another stream on the same subject refused it, not its own
            entry = pending.pop(correlation_id, None)
            if entry is not None:
                outcomes.append(failure(entry, response.error))
            else:
                self.unclaimed(response)
        if outcomes or taken_now:
            settle(outcomes, self._ledger, resolved)
            self._wake_waiters()
        self._resender.answers_handled()
