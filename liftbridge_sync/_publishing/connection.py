"""The publish stream's life: opened, drained, reopened after it ends, closed.

:class:`PublishConnection` is the owner loop's (:mod:`.owner`) one collaborator for the
stream. It opens a stream on the next broker in turn, numbering each one (its epoch, by
which events of a stream that ended are told apart), and the new stream sends every
pending publish in order under the send lock (but those a draining stream still
answers). When the broker shuts down gracefully, or the stream's acks are proven lost
(:mod:`.resending`), the old stream keeps draining (it answers what it was sent; what
it leaves unanswered goes again) and a new one opens at once (after the back-off if no
stream answered since the last drain or failure: a broker saying goodbye on every
connection gets no dial storm); at most
:data:`MAX_DRAINING` streams drain at a time (the oldest is cancelled: a broker that
never ends its calls cannot pile them up). When a stream ends with publishes pending,
the next one is due after a back-off from the retry policy. It fails the publishes no
broker ever saw once opening a stream has used up the retry policy (:mod:`.dialing`),
all of them when the stream fails for good, and closes every stream when the publisher
closes, by a deadline. A dial under way can be abandoned from another thread
(:meth:`PublishConnection.abort_dials`, the publisher's ``close()`` at its deadline):
the owner thread cannot see a close while it waits for a broker's SYN-ACK or handshake.
It also receives the stream's events, on the stream's thread: plain acks go to
:mod:`.answers` right there, everything else to the owner loop's inbox. The owner loop
decides when (its inbox and timers); this module does what a stream's events and the
reconnect timer call for.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Sequence

from liftbridge_sync._publishing.answers import AckRouter
from liftbridge_sync._publishing.dialing import DialAttempts
from liftbridge_sync._publishing.futures import settle
from liftbridge_sync._publishing.pending import Entry, FailureLedger, Forwarded, failure
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.opening import publish_opener
from liftbridge_sync._transport.publish_stream import (
    PublishStream,
    StreamClosed,
    StreamDraining,
    StreamOpener,
    StreamResponse,
    StreamResponses,
)
from liftbridge_sync._transport.retry import backoff_delay
from liftbridge_sync._wire.publish_codec import Answer, Refusal
from liftbridge_sync.errors import ClientClosedError, LiftbridgeError

__all__ = ["MAX_DRAINING", "PublishConnection"]

_log = logging.getLogger("liftbridge_sync.publisher")

#: Streams left to drain at most; a drain beyond it cancels the oldest.
MAX_DRAINING = 4
#: The least time a dial is given, seconds, however soon a pending publish is due.
_LEAST_DIAL = 0.25


class PublishConnection:
    """The publish stream, the streams still draining, and when to reopen.

    Args:
        core: The client's core (broker addresses, options).
        table: The pending table the streams serve.
        router: Ack routing (the stream's plain acks are resolved on its thread).
        resender: Told when a stream breaks.
        ledger: Failures of futures nobody waits for.
        inbox: The owner loop's inbox, for the stream's other events.
        wake_waiters: Wakes callers waiting for futures, room or flushes.
        opener: Opens a stream (default: the client's publish transport).
        clock: Monotonic clock.

    Owner-thread only, but for :meth:`on_stream_event` (the current stream's thread),
    :meth:`abort_dials` (any thread) and the counters (plain reads).
    """

    def __init__(
        self,
        core: ClientCore,
        table: PendingTable,
        router: AckRouter,
        resender: Resender,
        ledger: FailureLedger,
        inbox: queue.SimpleQueue[object],
        wake_waiters: Callable[[], None],
        *,
        opener: StreamOpener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._options = core.options
        self._table = table
        self._router = router
        self._resender = resender
        self._ledger = ledger
        self._inbox = inbox
        self._wake_waiters = wake_waiters
        self._opener = opener or publish_opener(core.options.publish_transport)
        self._clock = clock
        # Plain attributes, not properties: the owner loop reads them on every event
        # (the per-message path); only this object writes them.
        #: The live stream (``None``: not connected).
        self.stream: PublishStream | None = None
        #: Streams whose broker is shutting down gracefully, by epoch: each answers
        #: the publishes it was sent and then ends; the next stream does not send those
        #: again unless it ends without answering them. Alongside, their ids, each with
        #: when it had last been re-sent (see _on_drained).
        self.draining: dict[int, tuple[PublishStream, dict[str, float]]] = {}
        #: The number of the newest stream (events of older ones are told apart by it).
        self.epoch = 0
        #: When to open the next stream after one ended (``None``: not scheduled).
        self.reconnect_at: float | None = None
        self._address = ""  # of the current stream's broker
        self._failures = 0
        self._connects = 0
        #: Failed attempts to open a stream in a row (see dialing).
        self._dials = DialAttempts(core.options.retry)
        self._resent_after_reconnect = 0
        #: Abandons the dial under way, and refuses later ones, once the publisher closes.
        self._abort = DialAbort()

    @property
    def connects(self) -> int:
        """Streams opened so far."""
        return self._connects

    @property
    def resent_after_reconnect(self) -> int:
        """Publishes re-sent on a new stream after the one before ended."""
        return self._resent_after_reconnect

    def answered(self) -> None:
        """The current stream answered: reconnect back-off starts afresh."""
        self._failures = 0

    def on_kick(self) -> None:
        """A publish was entered while no stream is live: open one, unless one is due."""
        if self.stream is None and self.reconnect_at is None and self._table.entries:
            self._connect()

    def reconnect(self) -> None:
        """The back-off after a stream ended is over: open the next one, if still needed."""
        self.reconnect_at = None
        if self._table.entries:
            self._connect()

    def on_closed(self, event: StreamClosed) -> None:
        """A stream ended: the current one (reopen), or one that was draining."""
        if event.epoch == self.epoch:
            if event.reached:
                self._dials.succeeded()
            elif event.error is not None:  # a connect that failed late (grpc)
                self._dials.failed(self._address, event.error, self._clock())
            self._on_stream_closed(event.error)
        elif event.epoch in self.draining:
            self._on_drained(event.epoch, event.error)

    def on_draining(self, event: StreamDraining) -> None:
        """A stream's broker is shutting down gracefully."""
        if event.epoch == self.epoch and self.stream is not None:
            held = self._start_draining()
            _log.info(
                "publish stream %d: the broker is shutting down gracefully; %d publishes "
                "wait for its answers, new ones go to another connection",
                event.epoch,
                held,
            )

    def replace_deaf(self) -> None:
        """The live stream's acks are lost (see :meth:`.resending.Resender.on_probe_result`):
        new publishes go to a new stream on the next broker, and the old one drains as a
        broker shutting down would have it (its answers still count; what it leaves
        unanswered when the server ends the half-closed call goes again)."""
        if self.stream is None:
            return
        epoch = self.epoch
        held = self._start_draining()
        _log.warning(
            "publish stream %d: its acks stopped coming back while the leader kept its "
            "log committed; %d publishes held by it go again on another connection "
            "(once a probe proves them lost, or when it ends)",
            epoch,
            held,
        )

    def abort_dials(self) -> None:
        """Any thread: abandon the dial under way, if any (it fails with
        ``ClientClosedError`` at once), and open no stream any more. For ``close()``
        once its deadline passed while the owner thread was dialling."""
        self._abort.abort()

    def shutdown(self, error: BaseException, until: float) -> None:
        """The publisher closes: fail what is pending with ``error``, end every stream.

        Waits until ``until`` (the clock's time) at most. The live stream is half-closed
        first, so that requests already queued are written, and the server is given
        half the time left (2 s at most) to end the call before it is cancelled;
        draining streams are cancelled at once. A stream's thread that has not ended by
        ``until`` (cancelled, it ends by itself at its next turn) is not waited for.
        """
        self._abort.abort()
        self._fail_all(error)
        self._table.clear_deadlines()
        draining = [old for old, _ in self.draining.values()]
        self.draining.clear()
        for old in draining:
            old.cancel()
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.close()
            stream.join(min(2.0, self._left(until) / 2))
            stream.cancel()
            draining.append(stream)
        for old in draining:
            old.join(self._left(until))

    def _left(self, until: float) -> float:
        return max(0.0, until - self._clock())

    def _dial_deadline(self) -> float | None:
        """When a dial must be done (a :func:`time.monotonic` time): by the earliest
        pending publish's deadline, at least :data:`_LEAST_DIAL` from now. The dial
        blocks this thread, which fails publishes at their deadlines: a broker that
        accepted the connection and said nothing held ``publish(timeout=1)`` for the
        5 s of the handshake's own bound. ``None`` with nothing pending."""
        # One C-level copy: the stream threads pop answered entries meanwhile.
        deadlines = [entry.deadline for entry in list(self._table.entries.values())]
        if not deadlines:
            return None
        return time.monotonic() + max(_LEAST_DIAL, min(deadlines) - self._clock())

    def _connect(self) -> None:
        if self._abort.aborted:
            return  # the publisher is closing: what is pending fails as close() decides
        addresses = self._core.addresses()
        address = self._address = addresses[self.epoch % len(addresses)]
        self.epoch += 1
        try:
            stream = self._opener(
                self._core,
                address,
                self.epoch,
                self.on_stream_event,
                self._abort,
                self._dial_deadline(),
            )
        except ClientClosedError as exc:
            if self._abort.aborted:
                # close() abandoned the dial at its deadline: nothing was sent, and what
                # is pending fails with the close (or its own ack timeout).
                return
            self._fail_all(exc)
            return
        except LiftbridgeError as exc:
            # A transport that connects eagerly (h2) fails here instead of with an event.
            self.stream = None
            self._dials.failed(address, exc, self._clock())
            self._on_stream_closed(exc)
            return
        # A transport that cannot tell yet (grpc, channel not connected) says so later,
        # in StreamClosed; meanwhile what it is sent still counts as never sent.
        confirmed = getattr(stream, "confirmed", True)
        if confirmed:
            self._dials.succeeded()
        self.stream = stream
        self._connects += 1
        # Those of draining streams are answered by them, unless those fail.
        held: set[str] = set().union(*(ids.keys() for _, ids in self.draining.values()))
        entries = self._table.go_live(stream, held, confirmed)
        if entries:
            _log.info("publish stream %d open on %s; sent %d", self.epoch, address, len(entries))
        if self._connects > 1:
            self._resent_after_reconnect += len(entries)

    def _start_draining(self) -> int:
        """Retire the current stream: it answers what it was sent, so that stays with
        it; new publishes go to a new stream at once. How many publishes it holds."""
        stream = self.stream
        assert stream is not None
        ids = self._table.go_offline()
        pending = self._table.entries
        held = {i: e.resent_at for i in ids if (e := pending.get(i)) is not None}
        self.stream = None
        self.draining[self.epoch] = (stream, held)
        # Nothing more is queued on it (it is offline): what it still has to write.
        self._resender.draining(stream, held.keys(), stream.queued_mark())
        # Half-close after whatever was queued on it: the broker ends the call once it
        # has answered (it waits for nothing more from us).
        stream.close()
        for epoch in sorted(self.draining)[: len(self.draining) - MAX_DRAINING]:
            # Its end (StreamClosed) sends what it leaves unanswered again.
            self.draining[epoch][0].cancel()
        # Reset by an answer on the live stream: a second drain with none in between
        # waits for the back-off, as a failure would.
        self._failures += 1
        if self._failures > 1:
            delay = backoff_delay(self._options.retry, self._failures - 1)
            self.reconnect_at = self._clock() + delay
        else:
            self._connect()
        return len(held)

    def _on_drained(self, epoch: int, error: LiftbridgeError | None) -> None:
        """A draining stream ended: what it left unanswered goes again (in order) on the
        live stream, or on the next one."""
        stream, held = self.draining.pop(epoch)
        self._resender.drained(stream)
        stream.join(1.0)
        if error is not None:
            _log.info("draining publish stream %d ended: %s", epoch, error)

        pending = self._table.entries

        def unanswered() -> list[Entry]:
            # get(), not a look then an index: an ack may remove the entry in between.
            # Not those sent again on the live stream meanwhile (their partition went
            # silent): that copy answers for itself, and one more would follow it.
            left = [
                e
                for i, resent_at in held.items()
                if (e := pending.get(i)) is not None and e.resent_at == resent_at
            ]
            return sorted(left, key=lambda e: e.seq)

        count = self._table.send_again(unanswered)
        self._resent_after_reconnect += count
        if count:
            _log.warning("re-sent %d publishes a retired stream left unanswered", count)
        elif self.stream is None and self.reconnect_at is None and pending:
            self._connect()  # not connected: the next stream sends them

    def _on_stream_closed(self, error: LiftbridgeError | None) -> None:
        self._resender.disrupted()
        self._table.go_offline()
        pending = self._table.entries
        for _, held in self.draining.values():
            # Copies re-sent on this stream are lost with it: the draining stream's end
            # sends those it leaves unanswered again after all.
            for i in list(held):
                if (e := pending.get(i)) is not None:
                    held[i] = e.resent_at
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.join(1.0)
        if not self._table.entries:
            return  # reopen lazily on the next publish
        if error is not None and not error.retryable:
            _log.warning("publish stream failed: %s", error)
            self._fail_all(error)
            return
        if self._dials.exhausted(self._clock()):
            self._fail_unsent()
            if not self._table.entries:
                return
        # Keep reconnecting while anything is pending: each entry's own deadline bounds
        # how long it waits, so giving up earlier would only fail work that may succeed.
        self._failures += 1
        delay = backoff_delay(self._options.retry, self._failures)
        _log.warning(
            "publish stream broke (%s); reconnecting in %.3fs, then re-sending %d",
            error or "ended by server",
            delay,
            len(self._table),
        )
        self.reconnect_at = self._clock() + delay

    def _fail_unsent(self) -> None:
        """Fail the publishes no broker ever saw: no broker was reachable for as long as
        the retry policy allows. Those written to a broker before keep waiting for their
        ack (or its timeout): the broker may have stored them."""
        error = self._dials.error(self._clock())
        unsent = self._table.take_unsent()
        if unsent:
            _log.warning("%s; failing %d publishes never sent", error, len(unsent))
            settle([failure(e, error) for e in unsent], self._ledger)
            self._wake_waiters()

    def _fail_all(self, error: BaseException) -> None:
        entries = self._table.take_all()
        settle([failure(e, error) for e in entries], self._ledger)
        self._wake_waiters()

    def on_stream_event(self, event: object) -> None:
        """Stream events arrive here on the stream's thread.

        Plain acks of futures without done-callbacks are resolved right here (a
        ``publish()`` waiting for one wakes without a hop through the publisher thread);
        everything else goes to the publisher thread's inbox.
        """
        responses: Sequence[Answer]
        if type(event) is StreamResponses and event.epoch == self.epoch:
            responses = event.responses
        elif type(event) is StreamResponse and event.epoch == self.epoch:
            responses = [event.response]
        else:
            self._inbox.put(event)
            return
        self._failures = 0  # the stream works (reconnect back-off starts afresh)
        self._table.reached()
        rest = self._router.resolve_plain(responses)
        if rest:
            # Answers for no pending publish (a repeat, one that timed out, or a broker
            # sending nonsense) would change nothing on the owner thread either: dropped
            # here, so that a broker flooding them cannot grow the owner's inbox. An
            # entry never comes back once gone, so nothing is lost by looking now.
            pending = self._table.entries
            claimed: list[Answer] = []
            for answer in rest:
                if answer.correlation_id in pending:
                    claimed.append(answer)
                elif type(answer) is Refusal:
                    self._router.unclaimed(answer)  # a lost message: said, not dropped
            rest = claimed
        if rest:
            # Only this (the current stream's) thread counts up, only the owner down.
            self._router.forwarded()
            self._inbox.put(Forwarded(event.epoch, rest))
