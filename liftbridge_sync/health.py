"""Is the cluster reachable? One bounded probe for readiness endpoints and health checks.

:meth:`Client.check_health <liftbridge_sync.Client.check_health>` asks the brokers it
knows, one after another and round after round within the caller's time budget, for
fresh cluster metadata.
The first answer makes the cluster healthy; none within the budget raises
:class:`~liftbridge_sync.errors.BrokerUnavailableError` saying why for each address. A
client closed during the check raises :class:`~liftbridge_sync.errors.ClientClosedError`,
as it does before one.
The Flask view (:meth:`liftbridge_sync.flask.Liftbridge.readiness_view`) and the
django-health-check backend (:mod:`liftbridge_sync.django.health`) are built on it.
"""

from __future__ import annotations

import dataclasses
import time

from liftbridge_sync._durations import check_seconds
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync.errors import BrokerUnavailableError, ClientClosedError, LiftbridgeError

__all__ = ["Health", "probe"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """What a successful health probe saw.

    Immutable; safe to share between threads.
    """

    #: The broker address that answered.
    answered_by: str
    #: Ids of the brokers in the fresh metadata.
    brokers: tuple[str, ...]
    #: Number of streams in the cluster (the internal ones included).
    streams: int
    #: Seconds the answering request took.
    latency: float


#: The pause between two rounds of asking every broker, doubling up to
#: :data:`_LONGEST_PAUSE` (seconds).
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 0.5


def probe(core: ClientCore, timeout: float) -> Health:
    """Fetch fresh metadata from the first broker that answers within ``timeout`` seconds.

    The brokers are asked in turn, and again after a short pause while the budget
    lasts: a broker whose connection failed fast is asked again (gRPC gives a new
    connection's first attempt 100 ms, less than the handshake with a distant broker
    takes, and its later attempts longer). One that refused the request itself (any
    error but an unavailable broker) is not asked again. The fresh snapshot also
    refreshes the client's metadata cache.

    Raises:
        BrokerUnavailableError: no broker answered in time; the message gives each
            address's last failure.
        ClientClosedError: the client was closed during the check.
        ConfigurationError: ``timeout`` is not a finite number of seconds > 0.

    Thread-safe: uses the client core's thread-safe calls.
    """
    seconds = check_seconds("timeout", timeout, allow_zero=False, unlimited=False)
    assert seconds is not None  # unlimited=False: None and inf were refused
    deadline = time.monotonic() + seconds
    failures: dict[str, str] = {}
    refused: set[str] = set()
    rounds = 0
    pause = _FIRST_PAUSE
    while True:
        rounds += 1
        for address in core.addresses():
            if address in refused:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                failures.setdefault(address, f"not tried, {seconds:g} s budget spent")
                continue
            started = time.monotonic()
            try:
                response = core.invoke(
                    address,
                    rpcs.FETCH_METADATA,
                    api_pb2.FetchMetadataRequest(),
                    context=CallContext.GENERIC,
                    timeout=min(left, core.options.rpc_timeout),
                )
            except ClientClosedError:
                # Closed under the check (or before it reached this broker): the
                # cluster's state is unknown, not unreachable, and the other brokers
                # cannot be asked.
                raise ClientClosedError("check_health: the client was closed") from None
            except LiftbridgeError as exc:
                failures[address] = str(exc)
                if not isinstance(exc, BrokerUnavailableError):
                    refused.add(address)
                continue
            latency = time.monotonic() - started
            snapshot = core.adopt_metadata(response)
            return Health(
                answered_by=address,
                brokers=tuple(b.id for b in snapshot.brokers),
                streams=len(snapshot.streams),
                latency=latency,
            )
        left = deadline - time.monotonic()
        if left <= 0 or all(address in refused for address in core.addresses()):
            break
        try:
            core.back_off(min(pause, left))
        except ClientClosedError:
            raise ClientClosedError("check_health: the client was closed") from None
        pause = min(pause * 2, _LONGEST_PAUSE)
    raise BrokerUnavailableError(
        f"cluster unreachable within {seconds:g} s ({rounds} round{'s' if rounds > 1 else ''}"
        " of asking): " + "; ".join(f"{address}: {why}" for address, why in failures.items())
    )
