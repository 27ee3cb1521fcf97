"""A consumer's poll of its coordinator (the heartbeat) keeps to its call timeout, the
metadata refresh it makes for a coordinator the cache does not list included: retried
under the whole retry policy, it made the poll overrun the server's consumer timeout,
which then expired the member."""

from __future__ import annotations

import threading
import time

import pytest

import liftbridge_sync as lb
from liftbridge_sync import ClientOptions, RetryPolicy
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.models import FrozenMap, Metadata

#: Only max_delay ends the retries: a refresh under it takes 2 s with no broker up.
_POLICY = RetryPolicy(max_attempts=1_000_000, max_delay=2.0, initial=0.1, maximum=0.5, jitter=0)
#: A heartbeat call's time (a quarter of a 1.2 s consumer timeout).
_CALL_TIMEOUT = 0.3


def test_a_poll_for_a_coordinator_the_metadata_lacks_keeps_to_its_timeout() -> None:
    options = ClientOptions(addresses=("127.0.0.1:1",), rpc_timeout=1.0, retry=_POLICY)
    core = ClientCore(options)
    try:
        # Metadata cached, but without the coordinator (a broker that was down when it
        # was read): the poll refreshes it, and no broker answers.
        core.metadata.store(Metadata(brokers=(), streams=FrozenMap({})))
        member = Membership(core, "g", "m", ["s"], threading.Lock(), Counters())
        member.coordinator, member.epoch = "n9", 1
        member._call_timeout = _CALL_TIMEOUT
        started = time.monotonic()
        with pytest.raises(lb.LiftbridgeError):
            member._fetch_assignments()
        elapsed = time.monotonic() - started
    finally:
        core.close()
    assert elapsed < _CALL_TIMEOUT + 0.5
