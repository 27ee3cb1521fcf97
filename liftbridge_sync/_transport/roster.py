"""What a client remembers of each broker address beyond its channel: since when it has
been missing from the metadata (its channels are closed once it has been gone for
good, or once the last call on them ends) and what its port answered when asked
whether it speaks TLS.
"""

from __future__ import annotations

import logging
import threading
import time

from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync._runtime.scheduler import Scheduler
from liftbridge_sync._transport.channels import ChannelPool
from liftbridge_sync._transport.h2.sockets import speaks_tls
from liftbridge_sync._wire.status import plaintext_refused_error
from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError
from liftbridge_sync.models import Metadata
from liftbridge_sync.options import ClientOptions, parse_address

__all__ = ["DEPARTED_AFTER", "BrokerRoster"]

_log = logging.getLogger("liftbridge_sync.client")

#: Seconds a broker must be missing from the metadata before its channels are closed:
#: one that left for good stays missing, one restarting is back within seconds.
DEPARTED_AFTER = 30.0

#: A TLS verdict not asked for yet.
_UNASKED = object()
#: The longest a broker's port is asked whether it speaks TLS (connect, then handshake).
TLS_QUESTION_WAIT = 2.0


class BrokerRoster:
    """The departures and TLS verdicts of the addresses a client's channels go to.

    Thread-safe.
    """

    def __init__(self, options: ClientOptions, pool: ChannelPool) -> None:
        self._options = options
        self._pool = pool
        self._lock = threading.Lock()
        #: Seconds a broker must be missing from every metadata answer before the
        #: channels to it are closed (see forget_departed); tests shorten it.
        self.departed_after = DEPARTED_AFTER
        #: Since when each address with a channel has been missing from the metadata.
        self.absent_since: dict[str, float] = {}
        #: What each broker's port answered a TLS probe with (see ``tls_required``).
        self.tls_verdicts: dict[str, str | None | object] = {}
        #: Whether the timer thread looks for retired channels to close (see
        #: _watch_retired).
        self._watching = False

    def forget_departed(self, snapshot: Metadata | None, scheduler: Scheduler | None) -> None:
        """Retire the channels to addresses that have been neither a broker of the
        metadata nor a seed for :attr:`departed_after` seconds: under rolling
        replacements (new addresses each time) they would otherwise pile up, with their
        connections, until the client closes. The TLS verdicts (see
        :meth:`tls_required`) of the departed brokers, and of addresses neither listed
        nor holding a channel, are forgotten with them.

        An answer that lists no broker retires nothing. Called with the latest snapshot
        after every metadata update that replaced the broker list, so a late call with
        an older list cannot undo a newer one's view for long. While a retired channel
        is in use, ``scheduler`` (the client's timer thread, if running) closes it soon
        after its last call ends (see :meth:`_watch_retired`).
        """
        if snapshot is None or not snapshot.brokers:
            return
        try:
            self._retire(snapshot)
        finally:
            self._watch_retired(scheduler)

    def _retire(self, snapshot: Metadata) -> None:
        """:meth:`forget_departed` but for the watch."""
        listed = {broker.address for broker in snapshot.brokers}
        listed.update(self._options.addresses)
        now = time.monotonic()
        with self._lock:
            # A v1.9.0 broker lists only the peers that answered its survey in time: a
            # broker restarting, or slow for a moment, is left out of an answer or two.
            # Only one missing from every answer for departed_after is gone for good.
            held = set(self._pool.addresses())
            absent = held - listed
            since = self.absent_since
            for address in [a for a in since if a not in absent]:
                del since[address]
            for address in absent:
                since.setdefault(address, now)
            departed = {a for a in absent if now - since[a] >= self.departed_after}
            for address in departed:
                del since[address]
            # A verdict is kept only while its broker may still be called: one per
            # address ever seen would grow for good under rolling replacements (and a
            # broker coming back at a departed address is asked again).
            verdicts = self.tls_verdicts
            for address in [a for a in verdicts if a in departed or a not in held | listed]:
                del verdicts[address]
        if not departed:
            return
        gone = self._pool.retire(held - departed | listed)
        if gone:
            _log.debug("closing the channels to brokers no longer in the cluster: %s", gone)

    def _watch_retired(self, scheduler: Scheduler | None) -> None:
        """Have ``scheduler``'s thread give back every :data:`WAIT_SLICE` seconds what
        the finalizers of dropped calls released later, while a retired channel is in
        use: else a client making no more calls kept a departed broker's channel until
        it closed (see :meth:`.ChannelPool.release_later`)."""
        with self._lock:
            if scheduler is None or self._watching or not self._pool.retired_in_use:
                return
            self._watching = True
        try:
            scheduler.call_later(WAIT_SLICE, lambda: self._release_retired(scheduler))
        except (LiftbridgeError, RuntimeError):
            # Closing (it closes every channel), the timer died, or no thread could be
            # started for it: the pool's next operation gives the calls back instead.
            with self._lock:
                self._watching = False

    def _release_retired(self, scheduler: Scheduler) -> None:
        """The timer thread's look of :meth:`_watch_retired` (short: no I/O but closes)."""
        self._pool.release_deferred()
        with self._lock:
            self._watching = False
        self._watch_retired(scheduler)

    def tls_required(
        self, address: str, error: BrokerUnavailableError, budget: float | None = None
    ) -> BrokerUnavailableError:
        """``error`` told apart: a verified TLS answer from the broker's port makes it a
        final TLSError, an unverified one a retryable hint, none leaves it as it is.

        The port is asked once per address and client, within ``budget`` seconds if
        given (the answer is kept while the broker is listed, a seed, or has a channel:
        see :meth:`forget_departed`); the client's ``close()`` cuts the question short.

        Raises:
            ClientClosedError: the client was closed during the question.
        """
        verdict = self.tls_verdicts.get(address, _UNASKED)
        if verdict is _UNASKED:
            wait = TLS_QUESTION_WAIT if budget is None else min(TLS_QUESTION_WAIT, budget)
            if wait <= 0:
                return error  # the caller's time is up: asked next time
            host, port = parse_address(address)
            verdict = speaks_tls((host, port), wait, self._pool.closing)
            if verdict is not None or wait == TLS_QUESTION_WAIT:
                with self._lock:  # forget_departed goes through the verdicts under it
                    self.tls_verdicts[address] = verdict  # else perhaps only cut short
        if verdict is None:
            return error
        return plaintext_refused_error(
            str(error).split(":", 1)[0], error.details or "", verified=verdict == "verified"
        )
